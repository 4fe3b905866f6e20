package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Errors of verification and of the handler, matched with errors.Is.
var (
	// ErrMissingSignature: the request has no signature header.
	ErrMissingSignature = errors.New("webhook: missing signature")
	// ErrBadSignature: the signature is malformed or does not match.
	ErrBadSignature = errors.New("webhook: bad signature")
	// ErrExpired: a timestamped signature outside the tolerance window (a
	// replay, or a sender's clock far off).
	ErrExpired = errors.New("webhook: signature timestamp outside tolerance")
	// ErrTooLarge: a body above Config.MaxBody.
	ErrTooLarge = errors.New("webhook: body too large")
	// ErrReadBody: the body could not be read: the sender sent it more
	// slowly than Config.ReadTimeout allows (408), hung up, or sent a
	// malformed encoding (400).
	ErrReadBody = errors.New("webhook: body not read")
	// ErrBadEventID: a delivery id (the EventID header, or what
	// EventIDFrom read) longer than MaxEventID or not valid UTF-8 (400).
	ErrBadEventID = errors.New("webhook: bad delivery id")
	// ErrMethod: a method other than POST.
	ErrMethod = errors.New("webhook: method not allowed")
	// ErrStore: the event could not be stored; the sender should retry.
	ErrStore = errors.New("webhook: event not stored")
	// ErrConfig: an unusable Config.
	ErrConfig = errors.New("webhook: bad config")
	// ErrWeakSecret: a verifier's secret is empty or shorter than
	// MinSecretLen bytes. An unset environment variable must not turn into
	// a verifier that accepts deliveries signed with the empty key.
	ErrWeakSecret = errors.New("webhook: secret empty or too short")
)

// MinSecretLen is the shortest secret a verifier accepts, in bytes: 16
// bytes is 128 bits if the secret is random. GitHub's documentation
// generates secrets of 40 hex characters (SecureRandom.hex(20)) and Stripe's
// whsec_ secrets are longer still; a secret of fewer than 16 bytes is a
// password typed by hand or a mistake. Generate one with
// `openssl rand -hex 32`.
const MinSecretLen = 16

func checkSecret(secret string) error {
	if len(secret) == 0 {
		return fmt.Errorf("%w: the secret is empty (an unset environment variable?)", ErrWeakSecret)
	}
	if len(secret) < MinSecretLen {
		return fmt.Errorf("%w: %d bytes, at least %d needed (e.g. openssl rand -hex 32)", ErrWeakSecret, len(secret), MinSecretLen)
	}
	return nil
}

// Verifier checks a request's signature.
type Verifier interface {
	// SignatureHeader names the header that carries the signature; the
	// handler answers 401 at once when it is absent.
	SignatureHeader() string
	// Verify checks the signature in h against the raw body at time now.
	// It returns nil, ErrMissingSignature, ErrBadSignature or ErrExpired
	// (wrapped with details).
	Verify(h http.Header, body []byte, now time.Time) error
}

// Encoding of a signature in its header.
type Encoding int

const (
	// Hex is lowercase or uppercase hexadecimal.
	Hex Encoding = iota
	// Base64 is standard base64, padded or not.
	Base64
)

// HMACVerifier verifies HMAC-SHA256 signatures of the raw body carried in a
// header, encoded in hex or base64, after an optional prefix.
type HMACVerifier struct {
	secret []byte
	header string
	enc    Encoding
	prefix string
}

// HMAC verifies an HMAC-SHA256 of the body with secret, found in header,
// encoded with enc. WithPrefix sets a prefix that precedes the signature.
// Errors: ErrWeakSecret (a secret shorter than MinSecretLen bytes),
// ErrConfig (no header).
func HMAC(secret, header string, enc Encoding) (HMACVerifier, error) {
	if err := checkSecret(secret); err != nil {
		return HMACVerifier{}, err
	}
	if strings.TrimSpace(header) == "" {
		return HMACVerifier{}, fmt.Errorf("%w: no signature header", ErrConfig)
	}
	return HMACVerifier{secret: []byte(secret), header: http.CanonicalHeaderKey(header), enc: enc}, nil
}

// GitHub verifies GitHub's X-Hub-Signature-256 header: "sha256=" followed by
// the hex HMAC-SHA256 of the body with the webhook's secret. Errors:
// ErrWeakSecret.
func GitHub(secret string) (HMACVerifier, error) {
	v, err := HMAC(secret, "X-Hub-Signature-256", Hex)
	if err != nil {
		return v, err
	}
	return v.WithPrefix("sha256="), nil
}

// WithPrefix returns v expecting prefix before the signature (e.g.
// "sha256="). A signature without it is ErrBadSignature.
func (v HMACVerifier) WithPrefix(prefix string) HMACVerifier {
	v.prefix = prefix
	return v
}

// SignatureHeader implements Verifier.
func (v HMACVerifier) SignatureHeader() string { return v.header }

// Sign returns the header value that signs body: what a sender sets.
func (v HMACVerifier) Sign(body []byte) string {
	mac := macOf(v.secret, body)
	if v.enc == Base64 {
		return v.prefix + base64.StdEncoding.EncodeToString(mac)
	}
	return v.prefix + hex.EncodeToString(mac)
}

// Verify implements Verifier. A verifier not made by HMAC or GitHub (the
// zero value) has no secret and refuses every request with ErrWeakSecret.
func (v HMACVerifier) Verify(h http.Header, body []byte, _ time.Time) error {
	if err := checkSecret(string(v.secret)); err != nil {
		return err
	}
	val := strings.TrimSpace(h.Get(v.header))
	if val == "" {
		return fmt.Errorf("%w: no %s header", ErrMissingSignature, v.header)
	}
	sig, ok := strings.CutPrefix(val, v.prefix)
	if !ok {
		return fmt.Errorf("%w: %s does not start with %q", ErrBadSignature, v.header, v.prefix)
	}
	var got []byte
	var err error
	if v.enc == Base64 {
		got, err = base64.StdEncoding.DecodeString(sig)
		if err != nil {
			got, err = base64.RawStdEncoding.DecodeString(sig)
		}
	} else {
		got, err = hex.DecodeString(sig)
	}
	if err != nil {
		return fmt.Errorf("%w: %s is not valid %s", ErrBadSignature, v.header, v.enc)
	}
	if !hmac.Equal(got, macOf(v.secret, body)) {
		return fmt.Errorf("%w: %s does not match the body", ErrBadSignature, v.header)
	}
	return nil
}

func (e Encoding) String() string {
	if e == Base64 {
		return "base64"
	}
	return "hex"
}

// DefaultTolerance is Stripe's default tolerance window.
const DefaultTolerance = 5 * time.Minute

// StripeVerifier verifies Stripe-style timestamped signatures.
type StripeVerifier struct {
	secret    []byte
	header    string
	tolerance time.Duration
}

// Stripe verifies the Stripe-Signature header, "t=<unix seconds>,v1=<hex>"
// (several v1 entries during a secret rotation; other schemes ignored),
// where v1 is the HMAC-SHA256 with secret of "<t>.<body>". A timestamp more
// than tolerance away from now, either way, is ErrExpired: a captured
// request cannot be replayed later. tolerance <= 0 means DefaultTolerance.
// The secret is used whole, "whsec_" prefix included, as Stripe does.
// Errors: ErrWeakSecret.
func Stripe(secret string, tolerance time.Duration) (StripeVerifier, error) {
	if err := checkSecret(secret); err != nil {
		return StripeVerifier{}, err
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	return StripeVerifier{secret: []byte(secret), header: "Stripe-Signature", tolerance: tolerance}, nil
}

// WithHeader returns v reading its signature from header instead of
// Stripe-Signature, for senders that use Stripe's scheme under their own
// name.
func (v StripeVerifier) WithHeader(header string) StripeVerifier {
	v.header = http.CanonicalHeaderKey(header)
	return v
}

// SignatureHeader implements Verifier.
func (v StripeVerifier) SignatureHeader() string { return v.header }

// Sign returns the header value that signs body at time t.
func (v StripeVerifier) Sign(body []byte, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(macOf(v.secret, signedPayload(ts, body)))
}

// Verify implements Verifier. The signature is checked before the time, so
// that only an authentic but stale request is reported as ErrExpired. A
// verifier not made by Stripe (the zero value) refuses every request with
// ErrWeakSecret.
func (v StripeVerifier) Verify(h http.Header, body []byte, now time.Time) error {
	if err := checkSecret(string(v.secret)); err != nil {
		return err
	}
	val := strings.TrimSpace(h.Get(v.header))
	if val == "" {
		return fmt.Errorf("%w: no %s header", ErrMissingSignature, v.header)
	}
	var ts string
	var sigs [][]byte
	for part := range strings.SplitSeq(val, ",") {
		k, x, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			ts = x
		case "v1":
			if b, err := hex.DecodeString(x); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s has no valid timestamp", ErrBadSignature, v.header)
	}
	if len(sigs) == 0 {
		return fmt.Errorf("%w: %s has no v1 signature", ErrBadSignature, v.header)
	}
	want := macOf(v.secret, signedPayload(ts, body))
	ok := false
	for _, s := range sigs {
		// Every candidate is compared, in constant time each.
		if hmac.Equal(s, want) {
			ok = true
		}
	}
	if !ok {
		return fmt.Errorf("%w: no v1 signature of %s matches the body", ErrBadSignature, v.header)
	}
	at := time.Unix(sec, 0)
	if d := now.Sub(at); d > v.tolerance || d < -v.tolerance {
		return fmt.Errorf("%w: signed at %s, %s from now, tolerance %s", ErrExpired, at.UTC().Format(time.RFC3339), d.Round(time.Second), v.tolerance)
	}
	return nil
}

func signedPayload(ts string, body []byte) []byte {
	b := make([]byte, 0, len(ts)+1+len(body))
	b = append(b, ts...)
	b = append(b, '.')
	return append(b, body...)
}

func macOf(secret, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return m.Sum(nil)
}
