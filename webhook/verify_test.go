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
	gh := webhook.GitHub("s3cret")
	b64 := webhook.HMAC("k", "X-Signature", webhook.Base64).WithPrefix("v0:")
	hx := webhook.HMAC("k", "x-sig", webhook.Hex)
	st := webhook.Stripe("whsec_x", 0)
	other := webhook.Stripe("whsec_other", 0)
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
		{"github known vector", webhook.GitHub("It's a Secret to Everybody"),
			hdr("X-Hub-Signature-256", "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"),
			[]byte("Hello, World!"), nil},
		{"github missing", gh, hdr(), body, webhook.ErrMissingSignature},
		{"github wrong secret", gh, hdr("X-Hub-Signature-256", webhook.GitHub("other").Sign(body)), body, webhook.ErrBadSignature},
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
		{"stripe own tolerance", webhook.Stripe("whsec_x", time.Hour), hdr("Stripe-Signature", st.Sign(body, now.Add(-30*time.Minute))), body, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.v.Verify(tc.h, tc.body, now)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			}
		})
	}
}

func ExampleGitHub() {
	v := webhook.GitHub("It's a Secret to Everybody")
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
	v := webhook.Stripe("whsec_test", 5*time.Minute)
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
