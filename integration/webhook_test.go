package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/producer"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/jetflow-dev/jetflow/webhook"
)

// TestWebhookServerSIGKILL delivers webhooks while the nats-server process
// is SIGKILLed and started again. Senders retry every non-2xx answer, as a
// webhook sender does. Every delivery answered 200 is stored (its run
// exists after the restart), and with Config.EventID every delivery id is
// one run, however many times it was sent.
func TestWebhookServerSIGKILL(t *testing.T) {
	srv := startNATS(t)
	_, js := connect(t, srv.url())
	scfg := streams.Config{}
	p := newProducer(t, js, scfg)
	v, err := webhook.GitHub("integration-secret-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	withID := jetflow.Define[webhook.Event]("hooks.withid")
	noID := jetflow.Define[webhook.Event]("hooks.noid")
	handler := func(fn jetflow.Function[webhook.Event], eventID string) *httptest.Server {
		h, err := webhook.New(p, webhook.Config{Function: fn, Verifier: v, EventID: eventID, StoreTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		s := httptest.NewServer(h)
		t.Cleanup(s.Close)
		return s
	}
	sWithID, sNoID := handler(withID, "X-GitHub-Delivery"), handler(noID, "")

	type ack struct{ delivery, id string }
	var (
		mu      sync.Mutex
		acks    = map[string][]ack{} // by function
		sent    atomic.Int64
		refused atomic.Int64
	)
	// send posts one delivery until it is answered 200.
	send := func(url, fn, delivery string) error {
		body := []byte(fmt.Sprintf(`{"delivery":%q}`, delivery))
		deadline := time.Now().Add(90 * time.Second)
		for {
			req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
			if err != nil {
				return err
			}
			req.Header.Set("X-Hub-Signature-256", v.Sign(body))
			req.Header.Set("X-GitHub-Delivery", delivery)
			res, err := http.DefaultClient.Do(req)
			if err == nil {
				var out webhook.Response
				code := res.StatusCode
				if code == http.StatusOK {
					err = json.NewDecoder(res.Body).Decode(&out)
				}
				res.Body.Close()
				if code == http.StatusOK && err == nil {
					mu.Lock()
					acks[fn] = append(acks[fn], ack{delivery, out.ID})
					mu.Unlock()
					sent.Add(1)
					return nil
				}
				if code != http.StatusServiceUnavailable {
					return fmt.Errorf("delivery %s: status %d", delivery, code)
				}
				refused.Add(1)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("delivery %s not acknowledged: %v", delivery, err)
			}
			time.Sleep(20 * time.Millisecond) // the sender's retry interval
		}
	}
	const senders, perSender = 4, 40
	errs := make(chan error, 2*senders)
	var wg sync.WaitGroup
	for i := range senders {
		for _, s := range []struct {
			url, fn string
		}{{sWithID.URL, withID.Name()}, {sNoID.URL, noID.Name()}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range perSender {
					if err := send(s.url, s.fn, fmt.Sprintf("d-%d-%d", i, k)); err != nil {
						errs <- err
						return
					}
					// Every other delivery is sent twice: the second is a redelivery.
					if k%2 == 0 {
						if err := send(s.url, s.fn, fmt.Sprintf("d-%d-%d", i, k)); err != nil {
							errs <- err
							return
						}
					}
				}
			}()
		}
	}
	// SIGKILL the server in the middle of the deliveries, twice.
	for round := int64(1); round <= 2; round++ {
		testserver.Eventually(t, 60*time.Second, "deliveries acknowledged", func() bool {
			return sent.Load() >= round*60
		})
		srv.stop(syscall.SIGKILL)
		srv.start()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	waitJetStream(t, js)
	t.Logf("%d acknowledged, %d answered 503", sent.Load(), refused.Load())
	ctx := context.Background()
	mu.Lock()
	defer mu.Unlock()
	for fn, list := range acks {
		byDelivery := map[string]string{}
		for _, a := range list {
			var r *jetflow.Run
			retry(t, 30*time.Second, "get "+a.id, func(ctx context.Context) error {
				var err error
				r, err = p.Get(ctx, a.id)
				return err
			})
			ev, err := webhook.EventOf(r)
			if err != nil || r.Name != fn || !bytes.Contains(ev.Body, []byte(a.delivery)) {
				t.Errorf("acknowledged %s of %s: run %s %s, event %+v, %v", a.delivery, fn, r.ID, r.Name, ev, err)
			}
			if fn == withID.Name() {
				if prev, ok := byDelivery[a.delivery]; ok && prev != a.id {
					t.Errorf("delivery %s stored as runs %s and %s", a.delivery, prev, a.id)
				}
				byDelivery[a.delivery] = a.id
			}
		}
		if fn == withID.Name() {
			page, err := p.List(ctx, producer.Filter{Function: fn, Limit: 1000})
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
			if len(page.Runs) != len(byDelivery) {
				t.Errorf("%s: %d runs for %d deliveries", fn, len(page.Runs), len(byDelivery))
			}
		}
	}
}
