package webhook_test

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/webhook"
)

func TestVerifiers(t *testing.T) {
	t.Parallel()
	body := []byte(`{"action":"opened","number":1}`)
	now := time.Unix(1_700_000_000, 0)
	gh := must(webhook.GitHub("s3cret-of-16-bytes"))
	b64 := must(webhook.HMAC("k-0123456789abcdef", "X-Signature", webhook.Base64)).WithPrefix("v0:")
	hx := must(webhook.HMAC("k-0123456789abcdef", "x-sig", webhook.Hex))
	st := must(webhook.Stripe("whsec_x0123456789abcdef", 0))
	other := must(webhook.Stripe("whsec_other0123456789", 0))
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	for _, tc := range []struct {
		name string
		v    webhook.Verifier
		h    http.Header
		body []byte
		want error
	}{
		{"github ok", gh, hdr("X-Hub-Signature-256", gh.Sign(body)), body, nil},
		{"github known vector", must(webhook.GitHub("It's a Secret to Everybody")),
			hdr("X-Hub-Signature-256", "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"),
			[]byte("Hello, World!"), nil},
		{"github missing", gh, hdr(), body, webhook.ErrMissingSignature},
		{"github wrong secret", gh, hdr("X-Hub-Signature-256", must(webhook.GitHub("other-secret-0123456789")).Sign(body)), body, webhook.ErrBadSignature},
		{"github body changed", gh, hdr("X-Hub-Signature-256", gh.Sign(body)), []byte(`{"action":"closed"}`), webhook.ErrBadSignature},
		{"github no prefix", gh, hdr("X-Hub-Signature-256", gh.Sign(body)[len("sha256="):]), body, webhook.ErrBadSignature},
		{"github not hex", gh, hdr("X-Hub-Signature-256", "sha256=zz"), body, webhook.ErrBadSignature},
		{"github truncated", gh, hdr("X-Hub-Signature-256", gh.Sign(body)[:20]), body, webhook.ErrBadSignature},
		{"base64 ok", b64, hdr("X-Signature", b64.Sign(body)), body, nil},
		{"base64 garbage", b64, hdr("X-Signature", "v0:!!!"), body, webhook.ErrBadSignature},
		{"hex header any case", hx, hdr("X-SIG", hx.Sign(body)), body, nil},
		{"stripe ok", st, hdr("Stripe-Signature", st.Sign(body, now.Add(-time.Minute))), body, nil},
		{"stripe rotation", st, hdr("Stripe-Signature", other.Sign(body, now)+",v1="+st.Sign(body, now)[len("t=1700000000,v1="):]), body, nil},
		{"stripe replay", st, hdr("Stripe-Signature", st.Sign(body, now.Add(-6*time.Minute))), body, webhook.ErrExpired},
		{"stripe future", st, hdr("Stripe-Signature", st.Sign(body, now.Add(6*time.Minute))), body, webhook.ErrExpired},
		{"stripe wrong secret", st, hdr("Stripe-Signature", other.Sign(body, now)), body, webhook.ErrBadSignature},
		{"stripe old and forged", st, hdr("Stripe-Signature", other.Sign(body, now.Add(-time.Hour))), body, webhook.ErrBadSignature},
		{"stripe no timestamp", st, hdr("Stripe-Signature", "v1=00"), body, webhook.ErrBadSignature},
		{"stripe no v1", st, hdr("Stripe-Signature", fmt.Sprintf("t=%d,v0=00", now.Unix())), body, webhook.ErrBadSignature},
		{"stripe missing", st, hdr(), body, webhook.ErrMissingSignature},
		// A zero value has no secret: even a delivery signed with the empty
		// key is refused.
		{"zero hmac verifier", webhook.HMACVerifier{}, hdr("X-Hub-Signature-256", emptyKey.Sign(body)), body, webhook.ErrWeakSecret},
		{"zero stripe verifier", webhook.StripeVerifier{}, hdr("Stripe-Signature", emptyStripe.Sign(body, now)), body, webhook.ErrWeakSecret},
		{"stripe own tolerance", must(webhook.Stripe("whsec_x0123456789abcdef", time.Hour)), hdr("Stripe-Signature", st.Sign(body, now.Add(-30*time.Minute))), body, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.v.Verify(tc.h, tc.body, now)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			}
		})
	}
}

// emptyKey and emptyStripe sign with the empty key, as a forger who guesses
// that the receiver's secret variable is unset would.
var (
	emptyKey    = webhook.HMACVerifier{}.WithPrefix("sha256=")
	emptyStripe = webhook.StripeVerifier{}
)

func must[V any](v V, err error) V {
	if err != nil {
		panic(err)
	}
	return v
}

// Every constructor refuses an empty or short secret, so that an unset
// environment variable cannot make a receiver that accepts deliveries signed
// with the empty key.
func TestWeakSecretsRefused(t *testing.T) {
	t.Parallel()
	ctors := map[string]func(secret string) (webhook.Verifier, error){
		"GitHub": func(s string) (webhook.Verifier, error) { return webhook.GitHub(s) },
		"HMAC":   func(s string) (webhook.Verifier, error) { return webhook.HMAC(s, "X-Sig", webhook.Hex) },
		"Stripe": func(s string) (webhook.Verifier, error) { return webhook.Stripe(s, 0) },
	}
	for name, ctor := range ctors {
		for _, secret := range []string{"", "x", "fifteen-bytes!!"} {
			if _, err := ctor(secret); !errors.Is(err, webhook.ErrWeakSecret) {
				t.Errorf("%s(%q) = %v, want ErrWeakSecret", name, secret, err)
			}
		}
		if _, err := ctor("sixteen-bytes!!!"); err != nil {
			t.Errorf("%s with a 16-byte secret: %v", name, err)
		}
	}
	if _, err := webhook.HMAC("0123456789abcdef", " ", webhook.Hex); !errors.Is(err, webhook.ErrConfig) {
		t.Errorf("HMAC without a header: %v, want ErrConfig", err)
	}
	// The signature a forger computes with the empty key is the HMAC of
	// the body under "": a verifier must never have that key.
	body := []byte(`{"action":"opened"}`)
	h := http.Header{}
	h.Set("X-Hub-Signature-256", emptyKey.Sign(body))
	if err := emptyKey.Verify(h, body, time.Now()); !errors.Is(err, webhook.ErrWeakSecret) {
		t.Fatalf("zero verifier accepted a delivery signed with the empty key: %v", err)
	}
}

func ExampleGitHub() {
	v, err := webhook.GitHub("It's a Secret to Everybody")
	if err != nil {
		panic(err)
	}
	body := []byte("Hello, World!")
	fmt.Println(v.SignatureHeader(), v.Sign(body))
	h := http.Header{}
	h.Set("X-Hub-Signature-256", v.Sign(body))
	fmt.Println(v.Verify(h, body, time.Now()))
	fmt.Println(errors.Is(v.Verify(h, []byte("Hello, World?"), time.Now()), webhook.ErrBadSignature))
	// Output:
	// X-Hub-Signature-256 sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17
	// <nil>
	// true
}

func ExampleStripe() {
	v, err := webhook.Stripe("whsec_test_0123456789abcdef", 5*time.Minute)
	if err != nil {
		panic(err)
	}
	body := []byte(`{"type":"charge.succeeded"}`)
	signed := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h := http.Header{}
	h.Set("Stripe-Signature", v.Sign(body, signed))
	fmt.Println(v.Verify(h, body, signed.Add(time.Minute)))
	fmt.Println(errors.Is(v.Verify(h, body, signed.Add(10*time.Minute)), webhook.ErrExpired))
	// Output:
	// <nil>
	// true
}
