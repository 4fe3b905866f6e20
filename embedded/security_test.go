package embedded_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/internal/testserver"
)

func start(t *testing.T, o embedded.Options) *embedded.Server {
	t.Helper()
	o.Dir = t.TempDir()
	o.SyncEvery = time.Second
	srv, err := embedded.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// usable returns a check that JetStream answers on a connection, which it
// then closes.
func usable(t *testing.T) func(*nats.Conn, error) {
	return func(nc *nats.Conn, err error) { usableConn(t, nc, err) }
}

func usableConn(t *testing.T, nc *nats.Conn, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.AccountInfo(t.Context()); err != nil {
		t.Fatalf("JetStream: %v", err)
	}
}

func refusedConn(t *testing.T, what string, nc *nats.Conn, err error) {
	t.Helper()
	if err == nil {
		nc.Close()
		t.Fatalf("%s: connected, want refused", what)
	}
}

func quick() nats.Option { return nats.MaxReconnects(0) }

func TestTokenAuth(t *testing.T) {
	t.Parallel()
	srv := start(t, embedded.Options{Token: "s3cret-token"})
	nc, err := nats.Connect(srv.ClientURL(), quick())
	if !errors.Is(err, nats.ErrAuthorization) {
		if err == nil {
			nc.Close()
		}
		t.Fatalf("no token: %v, want an authorization error", err)
	}
	nc, err = nats.Connect(srv.ClientURL(), quick(), nats.Token("wrong"))
	refusedConn(t, "wrong token", nc, err)
	usable(t)(srv.Connect())
	usable(t)(nats.Connect(srv.ClientURL(), quick(), nats.Token("s3cret-token")))
}

func TestUserPasswordAuth(t *testing.T) {
	t.Parallel()
	srv := start(t, embedded.Options{User: "app", Password: "pa55word"})
	nc, err := nats.Connect(srv.ClientURL(), quick())
	refusedConn(t, "no login", nc, err)
	nc, err = nats.Connect(srv.ClientURL(), quick(), nats.UserInfo("app", "wrong"))
	refusedConn(t, "wrong password", nc, err)
	usable(t)(srv.Connect())
	u := strings.Replace(srv.ClientURL(), "nats://", "nats://app:pa55word@", 1)
	usable(t)(nats.Connect(u, quick()))
	// Dial by URL logs in with the URL's credentials.
	nc, closeFn, err := embedded.Dial(u, embedded.Options{})
	usableConn(t, nc, err)
	closeFn()
}

func TestTLS(t *testing.T) {
	t.Parallel()
	c := testserver.WriteCerts(t, t.TempDir())
	srv := start(t, embedded.Options{TLSCert: c.ServerCert, TLSKey: c.ServerKey, Token: "tok-0123456789"})
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.TLSConnectionState(); err != nil {
		t.Fatalf("connection without TLS: %v", err)
	}
	usableConn(t, nc, nil)
	// A client that does not trust the certificate is refused.
	nc, err = nats.Connect(srv.ClientURL(), quick(), nats.Token("tok-0123456789"), nats.Secure())
	refusedConn(t, "untrusted certificate", nc, err)
	usable(t)(nats.Connect(srv.ClientURL(), quick(), nats.Token("tok-0123456789"), nats.RootCAs(c.CA)))
}

func TestMutualTLS(t *testing.T) {
	t.Parallel()
	c := testserver.WriteCerts(t, t.TempDir())
	srv := start(t, embedded.Options{TLSCert: c.ServerCert, TLSKey: c.ServerKey, TLSCA: c.CA})
	nc, err := srv.Connect()
	refusedConn(t, "no client certificate", nc, err)
	usable(t)(srv.Connect(nats.ClientCert(c.ClientCert, c.ClientKey)))
	usable(t)(nats.Connect(srv.ClientURL(), quick(), nats.RootCAs(c.CA), nats.ClientCert(c.ClientCert, c.ClientKey)))
}

func TestSecurityOptionErrors(t *testing.T) {
	t.Parallel()
	for name, o := range map[string]embedded.Options{
		"user and token":     {User: "a", Password: "b", Token: "c"},
		"password alone":     {Password: "b"},
		"cert without key":   {TLSCert: "cert.pem"},
		"key without cert":   {TLSKey: "key.pem"},
		"CA without cert":    {TLSCA: "ca.pem"},
		"missing cert files": {TLSCert: "/nonexistent/cert.pem", TLSKey: "/nonexistent/key.pem"},
	} {
		o.Dir = t.TempDir()
		if srv, err := embedded.Start(o); err == nil {
			srv.Stop()
			t.Errorf("%s: started, want an error", name)
		}
	}
	if (embedded.Options{}).Secured() || !(embedded.Options{Token: "x"}).Secured() || !(embedded.Options{User: "u"}).Secured() {
		t.Fatal("Secured")
	}
}
