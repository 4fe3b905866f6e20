package dashboard_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/dashboard"
)

// doHost sends one request with the given Host header and returns the response
// (body closed: an events stream is cut once its header came). The deadline
// is a guard against a hanging handler: an allowed request reads runs from
// JetStream, which a loaded machine can stretch to seconds.
func doHost(t *testing.T, method, url, host string, hdr map[string]string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s (Host %s): %v", method, url, host, err)
	}
	res.Body.Close()
	return res
}

// Every route refuses a Host that is neither loopback nor allowed (DNS
// rebinding), GET and POST, the events stream and the assets too.
func TestHostChecked(t *testing.T) {
	t.Parallel()
	e := setup(t, dashboard.Config{AllowedHosts: []string{"jetflow.example", "ops.example:9000"}})
	id, err := e.P.RunAfter(context.Background(), time.Hour, idleFn.With(testArgs{N: 1}))
	if err != nil {
		t.Fatal(err)
	}
	routes := []struct{ method, path string }{
		{"GET", "/"}, {"GET", "/runs/" + id}, {"GET", "/functions"}, {"GET", "/crons"},
		{"GET", "/assets/app.js"}, {"GET", "/api/runs"}, {"GET", "/api/runs/" + id},
		{"GET", "/api/counts"}, {"GET", "/api/functions"}, {"GET", "/api/events"},
		{"POST", "/api/runs/" + id + "/cancel"}, {"GET", "/nope"}, {"DELETE", "/api/runs"},
	}
	for _, host := range []string{"evil.example", "evil.example:80", "localhost.evil.example", "127.0.0.1.nip.io", "jetflow.example.evil", "ops.example:9001", "ops.example"} {
		for _, r := range routes {
			if res := doHost(t, r.method, e.URL+r.path, host, nil); res.StatusCode != http.StatusMisdirectedRequest {
				t.Errorf("%s %s with Host %s: %d, want 421", r.method, r.path, host, res.StatusCode)
			}
		}
	}
	if r, err := e.P.Get(context.Background(), id); err != nil || r.State != "pending" {
		t.Fatalf("run after refused cancels: %+v %v", r, err)
	}
	for _, host := range []string{"", "localhost", "LOCALHOST:8080", "127.0.0.1:1", "127.1.2.3", "[::1]:8080", "jetflow.example", "jetflow.example:443", "JetFlow.Example.", "ops.example:9000"} {
		if res := doHost(t, "GET", e.URL+"/api/runs", host, nil); res.StatusCode != http.StatusOK {
			t.Errorf("Host %q: %d, want 200", host, res.StatusCode)
		}
	}
	// "*" allows any Host.
	anyHost := setup(t, dashboard.Config{AllowedHosts: []string{"*"}})
	if res := doHost(t, "GET", anyHost.URL+"/api/runs", "anything.example", nil); res.StatusCode != http.StatusOK {
		t.Fatalf(`AllowedHosts "*": %d`, res.StatusCode)
	}
	// Under a base path, its redirect is checked too.
	based := setup(t, dashboard.Config{BasePath: "/jf"})
	if res := doHost(t, "GET", based.URL+"/jf", "evil.example", nil); res.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("base path redirect with an evil Host: %d", res.StatusCode)
	}
}

func TestBearerToken(t *testing.T) {
	t.Parallel()
	const token = "tok-0123456789abcdef"
	e := setup(t, dashboard.Config{Middleware: dashboard.BearerToken(token)})
	for _, path := range []string{"/", "/api/runs", "/api/events", "/assets/app.js"} {
		res := doHost(t, "GET", e.URL+path, "", nil)
		if res.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(res.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("GET %s without a token: %d %q, want 401", path, res.StatusCode, res.Header.Get("WWW-Authenticate"))
		}
		if res := doHost(t, "GET", e.URL+path, "", map[string]string{"Authorization": "Bearer wrong"}); res.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong token: %d", path, res.StatusCode)
		}
		if res := doHost(t, "GET", e.URL+path, "", map[string]string{"Authorization": "Bearer " + token}); res.StatusCode != http.StatusOK {
			t.Errorf("GET %s with the token: %d", path, res.StatusCode)
		}
	}
	if res := doHost(t, "POST", e.URL+"/api/runs/x/cancel", "", nil); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST without a token: %d", res.StatusCode)
	}
	// A browser logs in once with ?token=: a cookie, and a redirect to
	// the URL without the token.
	res := doHost(t, "GET", e.URL+"/functions?token="+token+"&x=1", "", nil)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/functions?x=1" {
		t.Fatalf("login with ?token=: %d, Location %q", res.StatusCode, res.Header.Get("Location"))
	}
	var cookie *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == dashboard.TokenCookie {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode {
		t.Fatalf("cookie %+v", cookie)
	}
	for _, path := range []string{"/", "/api/events"} {
		if res := doHost(t, "GET", e.URL+path, "", map[string]string{"Cookie": cookie.Name + "=" + cookie.Value}); res.StatusCode != http.StatusOK {
			t.Errorf("GET %s with the cookie: %d", path, res.StatusCode)
		}
	}
	if res := doHost(t, "GET", e.URL+"/", "", map[string]string{"Cookie": dashboard.TokenCookie + "=wrong"}); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("a wrong cookie: %d", res.StatusCode)
	}
	if res := doHost(t, "GET", e.URL+"/?token=wrong", "", nil); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("a wrong ?token=: %d", res.StatusCode)
	}
	// The Host check comes first: a token does not make an evil Host OK.
	if res := doHost(t, "GET", e.URL+"/api/runs", "evil.example", map[string]string{"Authorization": "Bearer " + token}); res.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("evil Host with the token: %d", res.StatusCode)
	}
	// An empty token refuses everything.
	none := setup(t, dashboard.Config{Middleware: dashboard.BearerToken("")})
	if res := doHost(t, "GET", none.URL+"/api/runs", "", map[string]string{"Authorization": "Bearer "}); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("empty token: %d", res.StatusCode)
	}
}

func TestBasicAuth(t *testing.T) {
	t.Parallel()
	e := setup(t, dashboard.Config{Middleware: dashboard.BasicAuth("ops", "pa55-word")})
	req := func(user, pass string) int {
		r, err := http.NewRequest("GET", e.URL+"/api/runs", nil)
		if err != nil {
			t.Fatal(err)
		}
		if user != "" {
			r.SetBasicAuth(user, pass)
		}
		res, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode == http.StatusUnauthorized && !strings.HasPrefix(res.Header.Get("WWW-Authenticate"), "Basic") {
			t.Fatalf("401 without a Basic challenge")
		}
		return res.StatusCode
	}
	if c := req("", ""); c != http.StatusUnauthorized {
		t.Errorf("no login: %d", c)
	}
	if c := req("ops", "wrong"); c != http.StatusUnauthorized {
		t.Errorf("wrong password: %d", c)
	}
	if c := req("other", "pa55-word"); c != http.StatusUnauthorized {
		t.Errorf("wrong user: %d", c)
	}
	if c := req("ops", "pa55-word"); c != http.StatusOK {
		t.Errorf("login: %d", c)
	}
}
