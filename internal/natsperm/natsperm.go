// Package natsperm turns the server's permissions violations into errors of
// the call that caused them.
//
// NATS reports a denied publish or subscription asynchronously, as an -ERR
// on the connection (nats.Conn.LastError, the async error callback): the
// server drops the message and a request whose publish was dropped waits
// out its deadline. Do watches the connection while a call runs and ends it
// at once with the violation, so that a user without a permission gets the
// server's answer instead of a timeout.
package natsperm

import (
	"context"
	"errors"
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// pollEvery is how often Do reads the connection's last error.
const pollEvery = 2 * time.Millisecond

var subjectRe = regexp.MustCompile(`(Publish|Subscription) to "([^"]+)"`)

// Do runs fn with a context that is canceled as soon as nc reports a
// permissions violation on a subject that starts with one of prefixes
// (any subject when none are given), or on a subscription to the
// connection's reply inboxes. Fn then returns whatever it returns, and Do
// returns fn's error with the violation in place of "context canceled"
// (it matches the violation and nats.ErrPermissionViolation).
// A violation reported before Do was called is ignored.
func Do(ctx context.Context, nc *nats.Conn, fn func(ctx context.Context) error, prefixes ...string) error {
	if nc == nil {
		return fn(ctx)
	}
	before := nc.LastError()
	inbox := nc.Opts.InboxPrefix
	if inbox == "" {
		inbox = nats.InboxPrefix
	}
	inbox = strings.TrimSuffix(inbox, ".")
	check := func() error { return violation(nc.LastError(), before, inbox, prefixes) }

	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		t := time.NewTicker(pollEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-cctx.Done():
				return
			case <-t.C:
				if v := check(); v != nil {
					cancel(v)
					return
				}
			}
		}
	}()
	err := fn(cctx)
	close(done)
	<-watched
	if err == nil {
		return nil
	}
	v := context.Cause(cctx)
	if v == nil || !errors.Is(v, nats.ErrPermissionViolation) {
		v = check()
	}
	if v == nil {
		return err
	}
	return &violationError{v: v, msg: describe(err, v)}
}

// violationError is fn's error with the violation that ended it in place
// of "context canceled": it matches the violation (and
// nats.ErrPermissionViolation), not context.Canceled.
type violationError struct {
	v   error
	msg string
}

func (e *violationError) Error() string { return e.msg }
func (e *violationError) Unwrap() error { return e.v }

func describe(err, v error) string {
	msg := err.Error()
	for _, c := range []string{context.Canceled.Error(), context.DeadlineExceeded.Error()} {
		if strings.Contains(msg, c) {
			return strings.Replace(msg, c, v.Error(), 1)
		}
	}
	return v.Error() + " (" + msg + ")"
}

// OptionalPrefix starts the subjects of requests jetflow makes where a
// permission is optional: reads from a stream's leader
// (kv.LastFromLeader), which fall back to a direct get when denied. A
// violation on such a subject ends only a Do that watches that subject
// itself (a prefix at least as long as OptionalPrefix), never an enclosing
// call, and a command-line tool prints it rather than ending on it.
const OptionalPrefix = "$JS.API.STREAM.MSG.GET.KV_"

// Optional reports whether err is a permissions violation on a subject
// whose permission is optional (see OptionalPrefix).
func Optional(err error) bool {
	if err == nil || !errors.Is(err, nats.ErrPermissionViolation) {
		return false
	}
	m := subjectRe.FindStringSubmatch(err.Error())
	return m != nil && m[1] == "Publish" && isOptional(m[2])
}

// Probe reports whether err is a permissions violation of a rights probe
// (see ProbeKey): the answer the probe asked for, not a fault to report.
func Probe(err error) bool {
	if err == nil || !errors.Is(err, nats.ErrPermissionViolation) {
		return false
	}
	m := subjectRe.FindStringSubmatch(err.Error())
	return m != nil && m[1] == "Publish" && strings.Contains(m[2], ProbeKey)
}

func isOptional(subj string) bool {
	// After any JetStream API prefix ($JS.API., $JS.<domain>.API., custom).
	return strings.Contains(subj, "STREAM.MSG.GET.KV_")
}

// violation returns last when it is a permissions violation other than
// before on a subject Do watches.
func violation(last, before error, inbox string, prefixes []string) error {
	if last == nil || !errors.Is(last, nats.ErrPermissionViolation) {
		return nil
	}
	if before != nil && reflect.TypeOf(before).Comparable() && reflect.TypeOf(last) == reflect.TypeOf(before) && last == before {
		return nil
	}
	m := subjectRe.FindStringSubmatch(last.Error())
	if m == nil {
		return last // a violation of unknown form: take it
	}
	kind, subj := m[1], m[2]
	if kind == "Subscription" && (subj == inbox || strings.HasPrefix(subj, inbox+".")) {
		return last
	}
	optional := kind == "Publish" && isOptional(subj)
	probe := kind == "Publish" && strings.Contains(subj, ProbeKey)
	if len(prefixes) == 0 {
		if optional || probe {
			return nil
		}
		return last
	}
	for _, p := range prefixes {
		if strings.HasPrefix(subj, p) && (!optional || isOptional(p)) && (!probe || strings.Contains(p, ProbeKey)) {
			return last
		}
	}
	return nil
}

// ProbeKey is in the subject of every rights probe (the dashboard asks the
// server whether its user may write a bucket with a write that cannot
// succeed, whose violation is the answer). A violation on such a subject
// ends only a Do that watches that subject itself (a prefix holding
// ProbeKey), never a call that happens to run on the same connection.
const ProbeKey = "jetflow-dashboard-probe"
