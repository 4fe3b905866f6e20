// Package webhook receives webhooks durably: an http.Handler that verifies
// the sender's signature, stores the raw event as a jetflow run of your
// processing function, and answers 200 at once. Processing happens later on
// a worker, with retries; a failed event is kept with its body. This is the
// "durable event buffer" pattern: never do the work inside the request,
// never lose an event the sender was told you have.
//
//	var OnGitHub = jetflow.Define[webhook.Event]("github.event")
//
//	v, err := webhook.GitHub(os.Getenv("GITHUB_WEBHOOK_SECRET")) // ErrWeakSecret if unset or short
//	cfg := webhook.Config{
//		Function: OnGitHub,
//		Verifier: v,
//		EventID:  "X-GitHub-Delivery", // a redelivery is stored once
//	}
//	h, err := webhook.New(p, cfg)      // receiving service
//	http.Handle("/webhooks/github", h)
//
//	err = webhook.Register(w, cfg, func(ctx context.Context, j *worker.Job[webhook.Event]) error {
//		var push PushEvent
//		if err := j.Args.Decode(&push); err != nil {
//			return jetflow.Permanent(err)
//		}
//		...                             // processing service
//	})
//
// # What a request gets
//
//   - 405 for a method other than POST.
//   - 413 for a body above Config.MaxBody (default 1 MiB): ErrTooLarge.
//   - 408 for a body not received within Config.ReadTimeout (default
//     10 s), however slowly it trickles in, and 400 for one that cannot be
//     read (a malformed chunked encoding, a sender hanging up):
//     ErrReadBody. The handler sets the connection's read deadline for the
//     body itself, so a server without timeouts is not held by a slow
//     sender; headers are the server's to bound: serve with
//     http.Server{ReadHeaderTimeout: ...}, not http.ListenAndServe.
//   - 401 for a missing signature (ErrMissingSignature), a wrong one
//     (ErrBadSignature) or a Stripe-style timestamp outside the tolerance
//     window (ErrExpired). Nothing is stored.
//   - 503 when the event could not be stored: the sender should retry.
//     An event answered 503 may still land (a write the NATS client sent
//     again after a reconnect): with Config.EventID the retry is then the
//     duplicate; without it, the retry is a second run.
//   - 200 with {"id": "<run id>"} once the event is durable (the run's
//     record is written to JetStream); processing has not started. A
//     redelivery with the same Config.EventID header answers 200 with the
//     same id and "duplicate": true, and stores nothing new. Only a run of
//     the same function holding the same delivery id counts as the
//     duplicate: when the event's run id (Handler.RunID) is taken by
//     another run, such as one of a function whose name maps to the same
//     id prefix ("a.b" and "a_b"), the event is stored under a second
//     stable id, the one the answer names. A sender whose event id is in
//     the signed body rather than a header (Stripe's "id") is served the
//     same way with Config.EventIDFrom: BodyField("id"), read once the
//     signature is verified.
//   - 400 for a delivery id longer than MaxEventID (1 KB) or not valid
//     UTF-8: ErrBadEventID. Nothing is stored.
//
// Every request's body is buffered (up to MaxBody) before its signature
// can be checked, so unauthenticated senders can hold MaxBody of memory per
// open request for up to ReadTimeout: bound concurrent connections on the
// server (e.g. golang.org/x/net/netutil.LimitListener) where that matters.
//
// Signatures are HMAC-SHA256 over the raw body, compared in constant time
// (hmac.Equal): GitHub's X-Hub-Signature-256 (GitHub), any header with hex
// or base64 and an optional prefix (HMAC), and Stripe's timestamped
// Stripe-Signature, which also rejects a replay outside the tolerance window
// (Stripe). Config.OnError sees every rejection with its typed error.
//
// Every constructor refuses an empty secret, or one shorter than
// MinSecretLen (16) bytes, with ErrWeakSecret: an unset environment variable
// must not yield a receiver that accepts deliveries signed with the empty
// key. A verifier's zero value, which has no secret, refuses every request,
// and New refuses it.
//
// # The stored event
//
// The run's args are an Event: the raw body (exact bytes, as signed), the
// kept headers, the delivery id and the time received. EventOf reads it back
// from any run record, so a failed event can be inspected and replayed.
//
// # Processing
//
// Register serves the processing function on a worker with the Config's
// retry policy: at most MaxAttempts attempts (default 5), exponential
// backoff with jitter capped at one hour (default initial 1 s, base 2). A
// handler that returns an error is retried; jetflow.Permanent(err) fails the
// event at once. After the last attempt the run ends failed and its record
// keeps the event for the retention period (default 7 days).
//
// Event.Decode reads a JSON body, or the payload field of a form-encoded
// one (GitHub's application/x-www-form-urlencoded content type). A body it
// cannot decode, invalid UTF-8 included (refused, not replaced with
// U+FFFD), is a jetflow.Permanent error matching jetflow.ErrBadArgs:
// returned as is, it fails the event at once, the record naming the reason
// and keeping the body.
package webhook
