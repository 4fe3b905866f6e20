package jetflow_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/jetflow-dev/jetflow"
)

type EmailArgs struct {
	To      string `json:"to"`
	Subject string `json:"subject,omitempty"`
}

type ChargeArgs struct {
	OrderID string `json:"orderId"`
	Cents   int64  `json:"cents"`
}

// Functions are defined once, at package level, and shared by the code
// that schedules them and the code that runs them.
var (
	SendEmail = jetflow.Define[EmailArgs]("emails.send")
	Charge    = jetflow.Define[ChargeArgs]("payments.charge", jetflow.WithKind(jetflow.AtMostOnce))
)

func ExampleDefine() {
	fmt.Println(SendEmail.Name(), SendEmail.Kind())
	fmt.Println(Charge.Name(), Charge.Kind())
	// Output:
	// emails.send retryable
	// payments.charge atMostOnce
}

func ExampleFunction_With() {
	// With pairs a function with arguments of its own type: the compiler
	// refuses SendEmail.With(ChargeArgs{...}).
	call := SendEmail.With(EmailArgs{To: "a@b.c", Subject: "hello"})
	args, err := call.Encode()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(call.Name, call.Kind, string(args))
	// Output:
	// emails.send retryable {"to":"a@b.c","subject":"hello"}
}

func ExampleNewFunction() {
	// NewFunction is Define without the panic, for names that come from
	// configuration.
	_, err := jetflow.NewFunction[EmailArgs]("emails.>")
	fmt.Println(errors.Is(err, jetflow.ErrInvalidName))
	// Output:
	// true
}

func ExampleValidateName() {
	for _, name := range []string{"emails.send", "billing.invoice-pdf_v2", "emails.*", "emails..send", "emails send", ""} {
		if err := jetflow.ValidateName(name); errors.Is(err, jetflow.ErrInvalidName) {
			fmt.Printf("%q: invalid\n", name)
			continue
		}
		fmt.Printf("%q: ok\n", name)
	}
	// Output:
	// "emails.send": ok
	// "billing.invoice-pdf_v2": ok
	// "emails.*": invalid
	// "emails..send": invalid
	// "emails send": invalid
	// "": invalid
}

func ExampleValidateRunID() {
	for _, id := range []string{"order-42-payment-check", "order.42", "order 42"} {
		fmt.Printf("%q: %t\n", id, jetflow.ValidateRunID(id) == nil)
	}
	// Output:
	// "order-42-payment-check": true
	// "order.42": false
	// "order 42": false
}

func ExamplePermanent() {
	// A handler returns Permanent to fail the run without more attempts.
	err := jetflow.Permanent(errors.New("card declined"))
	fmt.Println(err, jetflow.IsPermanent(err), jetflow.IsPermanent(errors.New("timeout")))
	// Output:
	// card declined true false
}

func ExampleRetryAfter() {
	// A handler returns RetryAfter to choose the delay of the next attempt,
	// e.g. from a rate-limited API's Retry-After header.
	err := jetflow.RetryAfter(30*time.Second, errors.New("429 too many requests"))
	var ra *jetflow.RetryAfterError
	fmt.Println(errors.As(err, &ra), ra.Delay)
	// Output:
	// true 30s
}

func ExampleBackoff() {
	// The delay after n failures is uniform in [0, Cap(n)]; NoJitter makes
	// it exactly Cap(n).
	b := jetflow.Backoff{Initial: time.Second, Max: 10 * time.Second, NoJitter: true}
	for n := 1; n <= 5; n++ {
		fmt.Print(b.Delay(n), " ")
	}
	fmt.Println()
	// Output:
	// 1s 2s 4s 8s 10s
}

func ExampleState_Terminal() {
	for _, s := range []jetflow.State{jetflow.Pending, jetflow.InProgress, jetflow.Success, jetflow.Failed, jetflow.Canceled} {
		fmt.Println(s, s.Terminal())
	}
	// Output:
	// pending false
	// inProgress false
	// success true
	// failed true
	// canceled true
}
