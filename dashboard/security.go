package dashboard

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// hostAllowed reports whether a request's Host may be served: a loopback
// name or address (localhost, 127.0.0.0/8, ::1) on any port, or an entry
// of allowed: "*" (any host), a host name or address (any port), or
// host:port.
//
// This is the defense against DNS rebinding: a page on evil.example that
// makes its name resolve to 127.0.0.1 reaches the dashboard from the
// visitor's browser as the same origin, but its requests carry "Host:
// evil.example", which is refused.
func hostAllowed(hostport string, allowed []string) bool {
	if hostport == "" {
		return false
	}
	host, port := splitHost(hostport)
	if host == "localhost" {
		return true
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	for _, a := range allowed {
		a = strings.ToLower(strings.TrimSpace(a))
		if a == "*" {
			return true
		}
		ah, ap := splitHost(a)
		if ah == host && (ap == "" || ap == port) {
			return true
		}
	}
	return false
}

// splitHost splits host[:port] ([v6]:port) into a lowercase host without a
// trailing dot or brackets, and the port ("" if none).
func splitHost(hostport string) (host, port string) {
	hostport = strings.ToLower(hostport)
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		host, port = h, p
	} else {
		host = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
	}
	return strings.TrimSuffix(host, "."), port
}

// checkHost refuses requests whose Host header is not allowed, with 421
// Misdirected Request, for every route and method.
func checkHost(allowed []string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hostAllowed(r.Host, allowed) {
			msg := "host " + quoteHost(r.Host) + " is not allowed: add it to the dashboard's allowed hosts (dashboard.Config.AllowedHosts, jetflow dashboard --allow-host)"
			if isAPI(r) {
				writeError(w, http.StatusMisdirectedRequest, msg)
				return
			}
			http.Error(w, msg, http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func quoteHost(h string) string {
	if len(h) > 100 {
		h = h[:100] + "..."
	}
	return "\"" + url.PathEscape(h) + "\""
}

func isAPI(r *http.Request) bool { return strings.Contains(r.URL.Path, "/api/") }

// TokenCookie is the cookie BearerToken sets once a browser has opened a
// page with ?token=.
const TokenCookie = "jetflow_token"

// BearerToken is an authentication middleware for Config.Middleware: a
// request passes with "Authorization: Bearer <token>", with the
// TokenCookie cookie holding the token, or with "?token=<token>" in its
// URL. A page opened with ?token= sets the cookie (HttpOnly,
// SameSite=Strict) and is redirected to its URL without the token, so
// that a browser logs in once and its event stream, which cannot send
// headers, carries the cookie. Others get 401. Tokens are compared in
// constant time. An empty token refuses every request.
func BearerToken(token string) func(http.Handler) http.Handler {
	want := sha256.Sum256([]byte(token))
	ok := func(got string) bool {
		if token == "" || got == "" {
			return false
		}
		h := sha256.Sum256([]byte(got))
		return subtle.ConstantTimeCompare(h[:], want[:]) == 1
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if auth, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); found && ok(strings.TrimSpace(auth)) {
				next.ServeHTTP(w, r)
				return
			}
			if c, err := r.Cookie(TokenCookie); err == nil && ok(c.Value) {
				next.ServeHTTP(w, r)
				return
			}
			if q := r.URL.Query().Get("token"); ok(q) {
				if (r.Method == http.MethodGet || r.Method == http.MethodHead) && !isAPI(r) {
					http.SetCookie(w, &http.Cookie{
						Name: TokenCookie, Value: q, Path: "/", HttpOnly: true,
						SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
					})
					u := *r.URL
					qs := u.Query()
					qs.Del("token")
					u.RawQuery = qs.Encode()
					u.Scheme, u.Host = "", ""
					w.Header().Set("Cache-Control", "no-store")
					http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
					return
				}
				next.ServeHTTP(w, r)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="jetflow"`)
			unauthorized(w, r, "log in: open the dashboard's URL with ?token=<token>, or send Authorization: Bearer <token>")
		})
	}
}

// BasicAuth is an authentication middleware for Config.Middleware: a
// request passes with HTTP basic authentication as user and password
// (compared in constant time); others get 401 and the browser's login
// prompt. An empty user refuses every request.
func BasicAuth(user, password string) func(http.Handler) http.Handler {
	wantU, wantP := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(password))
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			u, p, found := r.BasicAuth()
			gu, gp := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
			uOK := subtle.ConstantTimeCompare(gu[:], wantU[:])
			pOK := subtle.ConstantTimeCompare(gp[:], wantP[:])
			if found && user != "" && uOK&pOK == 1 {
				next.ServeHTTP(w, r)
				return
			}
			w.Header().Set("WWW-Authenticate", `Basic realm="jetflow", charset="UTF-8"`)
			unauthorized(w, r, "log in with the dashboard's user and password")
		})
	}
}

func unauthorized(w http.ResponseWriter, r *http.Request, msg string) {
	if isAPI(r) {
		writeError(w, http.StatusUnauthorized, msg)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Error(w, msg, http.StatusUnauthorized)
}
