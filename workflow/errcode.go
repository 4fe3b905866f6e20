package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/nats-io/nats.go/jetstream"
)

// A workflow that fails keeps, beside its record's error text, the code of
// the sentinel error its failure matches (errors.Is): journal key
// <id>.end, written before the record's end. Result and Status.Err return
// an *Error that errors.Is matches against that sentinel again, in any
// process that knows the code (the built-in ones below, and those given to
// RegisterError).

// Error is the error of a workflow that failed, as Result and Status.Err
// return it: the record's error text, and the code of the sentinel error
// it matched when it failed. errors.Is matches that sentinel.
type Error struct {
	ID   string // the workflow's id
	Msg  string // the record's error text
	Code string // "" when the failure matched no known sentinel
}

func (e *Error) Error() string { return fmt.Sprintf("workflow %s failed: %s", e.ID, e.Msg) }

// Unwrap returns the sentinel error Code stands for (nil when the code is
// unknown to this process: RegisterError it here too).
func (e *Error) Unwrap() error { return errorOfCode(e.Code) }

// coded is a sentinel error and its code.
type coded struct {
	code string
	err  error
}

// builtinCodes are the sentinels a workflow's failure is coded with, most
// specific first (ErrArgsTooLarge matches ErrBadArgs too).
var builtinCodes = []coded{
	{"nondeterministic", ErrNondeterministic},
	{"invalidStepName", ErrInvalidStepName},
	{"invalidEventName", ErrInvalidEventName},
	{codeEventTimeout, ErrEventTimeout},
	{codeTooLarge, ErrResultTooLarge},
	{codeInactive, ErrDefinitionInactive},
	{codeArgsTooLarge, producer.ErrArgsTooLarge},
	{codeWorkerLost, jetflow.ErrWorkerLost},
	{codeCanceled, jetflow.ErrCanceled},
	{"timeout", jetflow.ErrTimeout},
	{"panic", jetflow.ErrPanic},
	{"badRecord", jetflow.ErrBadRecord},
	{"notWorkflowRecord", ErrBadRecord},
	{codeInvalidName, jetflow.ErrInvalidName},
	{codeBadArgs, jetflow.ErrBadArgs},
	{"notFound", jetflow.ErrNotFound},
}

var (
	codesMu   sync.RWMutex
	userCodes []coded
)

// ErrCodeTaken: RegisterError with a code already registered (or built in)
// for another error.
var ErrCodeTaken = errors.New("workflow: error code already registered")

// RegisterError registers sentinel err under code, so that a workflow that
// fails with an error matching it (errors.Is) returns, from Result and
// Status.Err, an error that matches it too. Register it, under the same
// code, in the workers that run the workflow and in the processes that
// read its result. Registering the same pair again is a no-op. Errors:
// ErrCodeTaken, jetflow.ErrBadArgs (an empty code or a nil err).
func RegisterError(code string, err error) error {
	if code == "" || err == nil {
		return fmt.Errorf("%w: RegisterError(%q, %v)", jetflow.ErrBadArgs, code, err)
	}
	codesMu.Lock()
	defer codesMu.Unlock()
	for _, c := range append(builtinCodes[:len(builtinCodes):len(builtinCodes)], userCodes...) {
		switch {
		case c.code == code && c.err == err:
			return nil
		case c.code == code:
			return fmt.Errorf("%w: %q", ErrCodeTaken, code)
		}
	}
	userCodes = append(userCodes, coded{code, err})
	return nil
}

// codeOf is the code of the first sentinel err matches: the user's first
// (their errors usually wrap a step's), then the built-in ones; "" for
// none.
func codeOf(err error) string {
	if err == nil {
		return ""
	}
	codesMu.RLock()
	defer codesMu.RUnlock()
	for _, c := range userCodes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	for _, c := range builtinCodes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return ""
}

// errorOfCode is the sentinel of code, nil when unknown.
func errorOfCode(code string) error {
	if code == "" {
		return nil
	}
	codesMu.RLock()
	defer codesMu.RUnlock()
	for _, c := range builtinCodes {
		if c.code == code {
			return c.err
		}
	}
	for _, c := range userCodes {
		if c.code == code {
			return c.err
		}
	}
	return nil
}

// endKey is the journal key of a failed workflow's error code.
func endKey(wf string) string { return wf + ".end" }

// endCode is the value under endKey: the code, and the creation time of
// the workflow's record, so that a code left by an earlier workflow of the
// same id is not taken for this one's.
type endCode struct {
	Code    string    `json:"code"`
	Created time.Time `json:"created"`
}

// putEndCode stores the code of workflow r's failure err, if it has one.
// Written before the record's end, so that a reader of the failed record
// finds it.
func putEndCode(ctx context.Context, jr *journal, r *jetflow.Run, err error) error {
	code := codeOf(err)
	if code == "" {
		return nil
	}
	b, _ := json.Marshal(endCode{Code: code, Created: r.CreationTime})
	if _, perr := jr.kv.Put(ctx, endKey(r.ID), b); perr != nil {
		return fmt.Errorf("workflow %s: store its error's code: %w", r.ID, perr)
	}
	return nil
}

// readEndCode reads the code of failed workflow r's error ("" for none).
func readEndCode(ctx context.Context, jr *journal, r *jetflow.Run) (string, error) {
	e, err := jr.kv.Get(ctx, endKey(r.ID))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("workflow %s: its error's code: %w", r.ID, err)
	}
	return decodeEndCode(e.Value(), r), nil
}

// decodeEndCode is the code in v if it is workflow r's ("" otherwise).
func decodeEndCode(v []byte, r *jetflow.Run) string {
	var ec endCode
	if json.Unmarshal(v, &ec) != nil || !ec.Created.Equal(r.CreationTime) {
		return ""
	}
	return ec.Code
}

// failure is the error of failed workflow r with code.
func failure(r *jetflow.Run, code string) error {
	return &Error{ID: r.ID, Msg: r.Error, Code: code}
}

// putBrokenCode stores the code of cause, the failure of workflow id whose
// journal cannot be read, before failBroken ends its record (nothing when
// the record cannot be read: failBroken says why).
func putBrokenCode(ctx context.Context, p *producer.Producer, id string, cause error) error {
	r, err := p.Get(ctx, id)
	if err != nil || r.State.Terminal() {
		return nil //nolint:nilerr // failBroken reads the record again and reports
	}
	jr, err := openJournal(ctx, p)
	if err != nil {
		return err
	}
	return putEndCode(ctx, jr, r, cause)
}
