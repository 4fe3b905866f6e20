package jetflow

import (
	"encoding/json"
	"fmt"
)

// Call is one invocation of a function with its arguments, made by
// Function.With so that the argument type is checked by the compiler:
//
//	id, err := p.RunAfter(ctx, 5*time.Second, SendEmail.With(EmailArgs{To: "a@b.c"}))
type Call struct {
	Name string
	Kind Kind
	Args any
}

// With pairs the function with its arguments.
func (f Function[A]) With(args A) Call { return Call{Name: f.name, Kind: f.kind, Args: args} }

// Encode returns the JSON arguments of the call, or ErrBadArgs;
// ErrInvalidName for a name that is not valid or a Kind other than
// Retryable, AtMostOnce or empty (Retryable).
func (c Call) Encode() (json.RawMessage, error) {
	if err := ValidateName(c.Name); err != nil {
		return nil, err
	}
	if c.Kind != "" && c.Kind != Retryable && c.Kind != AtMostOnce {
		return nil, fmt.Errorf("%w: %s: unknown kind %.64q", ErrInvalidName, c.Name, c.Kind)
	}
	if raw, ok := c.Args.(json.RawMessage); ok {
		if len(raw) == 0 {
			return json.RawMessage("null"), nil
		}
		if !json.Valid(raw) {
			return nil, fmt.Errorf("%w: %s: invalid JSON", ErrBadArgs, c.Name)
		}
		return raw, nil
	}
	b, err := json.Marshal(c.Args)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadArgs, c.Name, err)
	}
	return b, nil
}

// RawCall invokes a function by name with JSON arguments, for callers that
// do not have the Go type (the CLI, other languages' gateways).
func RawCall(name string, args json.RawMessage) Call {
	return Call{Name: name, Kind: Retryable, Args: args}
}
