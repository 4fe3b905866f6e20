package jetflow

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Kind says how a function behaves when a worker fails or is lost, after
// Convex's mutations and actions.
type Kind string

const (
	// Retryable functions are delivered at least once, retried with
	// exponential backoff and jitter, and have exactly one recorded outcome.
	// Runs they schedule are committed only if they succeed.
	Retryable Kind = "retryable"
	// AtMostOnce functions are never run twice: the run is claimed before the
	// handler starts, and a worker lost mid-run leaves it failed.
	AtMostOnce Kind = "atMostOnce"
)

// Function is a typed reference to a named function. Producers and workers
// share one value, so the compiler pairs the argument type on both sides.
type Function[A any] struct {
	name string
	kind Kind
}

// FunctionOption configures a Function at definition time.
type FunctionOption func(*functionOptions)

type functionOptions struct{ kind Kind }

// WithKind sets the kind of a function (default Retryable).
func WithKind(k Kind) FunctionOption { return func(o *functionOptions) { o.kind = k } }

// NewFunction returns a function reference, or ErrInvalidName when name is
// not a valid function name (see ValidateName).
func NewFunction[A any](name string, opts ...FunctionOption) (Function[A], error) {
	if err := ValidateName(name); err != nil {
		return Function[A]{}, err
	}
	o := functionOptions{kind: Retryable}
	for _, opt := range opts {
		opt(&o)
	}
	if o.kind != Retryable && o.kind != AtMostOnce {
		return Function[A]{}, fmt.Errorf("%w: unknown kind %q", ErrInvalidName, o.kind)
	}
	return Function[A]{name: name, kind: o.kind}, nil
}

// Define is NewFunction for package-level declarations: it panics on an
// invalid name, the way regexp.MustCompile does.
//
//	var SendEmail = jetflow.Define[EmailArgs]("emails.send")
func Define[A any](name string, opts ...FunctionOption) Function[A] {
	f, err := NewFunction[A](name, opts...)
	if err != nil {
		panic(err)
	}
	return f
}

// Name is the function's name, as used in subjects and run records.
func (f Function[A]) Name() string { return f.name }

// Kind is Retryable or AtMostOnce.
func (f Function[A]) Kind() Kind { return f.kind }

// ValidateName checks a function name: one or more dot-separated tokens of
// ASCII letters, digits, '_' and '-', at most 128 bytes. Anything else
// (wildcards, spaces, empty tokens) would make an invalid or overlapping
// subject and is refused with ErrInvalidName.
func ValidateName(name string) error {
	if name == "" || len(name) > 128 {
		return fmt.Errorf("%w: %q must be 1-128 bytes", ErrInvalidName, name)
	}
	for rest := name; ; {
		tok, after, more := strings.Cut(rest, ".")
		if !validToken(tok) {
			return fmt.Errorf("%w: %q: tokens are letters, digits, '_' and '-' separated by single dots", ErrInvalidName, name)
		}
		if !more {
			return nil
		}
		rest = after
	}
}

// ValidateRunID checks a run id (generated or given by the caller as an
// idempotency key): 1-200 bytes of ASCII letters, digits, '_' and '-'.
func ValidateRunID(id string) error {
	if len(id) > 200 || !validToken(id) {
		return fmt.Errorf("%w: %q: ids are 1-200 letters, digits, '_' or '-'", ErrInvalidRunID, id)
	}
	return nil
}

func validToken(tok string) bool {
	if tok == "" {
		return false
	}
	for i := 0; i < len(tok); i++ {
		if !IsNameByte(tok[i]) {
			return false
		}
	}
	return true
}

// IsNameByte reports whether c may appear in a token of a function name
// (and of the other names jetflow checks): a letter, a digit, '_' or '-'.
func IsNameByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		return true
	}
	return false
}

// DerivedID returns id when it is a valid run id, or a stable 41-byte hash
// of it otherwise: for ids built from other ids (children, completions, cron
// fires) that must stay deterministic.
func DerivedID(id string) string {
	if ValidateRunID(id) == nil {
		return id
	}
	return shortID(id)
}

func shortID(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "h" + hex.EncodeToString(sum[:20])
}
