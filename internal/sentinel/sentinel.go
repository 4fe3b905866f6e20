// Package sentinel makes sentinel errors that are a kind of another one.
package sentinel

import "errors"

// Kind returns a sentinel error whose text is msg alone and that matches
// parent too (errors.Is), as fmt.Errorf("msg: %w", parent) would, without
// repeating parent's text: kv.ErrBadCronRecord reads "jetflow: unreadable
// cron record", not "jetflow: unreadable cron record: jetflow: unreadable
// run record".
func Kind(msg string, parent error) error { return &kind{msg: msg, parent: parent} }

type kind struct {
	msg    string
	parent error
}

func (e *kind) Error() string { return e.msg }
func (e *kind) Unwrap() error { return e.parent }

// IsAny reports whether err matches any of targets (errors.Is).
func IsAny(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}
