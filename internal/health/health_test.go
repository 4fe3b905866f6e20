package health

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestHandlerAnswersByPathSuffix(t *testing.T) {
	t.Parallel()
	src := Funcs{
		LiveFunc:  func() Report { return NewReport(Check{Name: "loop", OK: true}) },
		ReadyFunc: func() Report { return NewReport(Check{Name: "connected", OK: false, Detail: "closed"}) },
	}
	h := Handler(src)
	for _, tc := range []struct {
		method, path string
		code         int
		body         string
	}{
		{"GET", "/livez", 200, `"status":"ok"`},
		{"GET", "/worker/livez", 200, `"status":"ok"`},
		{"HEAD", "/readyz", 503, ""},
		{"GET", "/readyz", 503, `"detail":"closed"`},
		{"POST", "/readyz", 405, ""},
		{"GET", "/other", 404, ""},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
		if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.body) {
			t.Errorf("%s %s: %d %q, want %d with %q", tc.method, tc.path, rec.Code, rec.Body.String(), tc.code, tc.body)
		}
	}
}

func TestLoopCheck(t *testing.T) {
	t.Parallel()
	var b Beat
	if c := LoopCheck("loop", &b, time.Minute, false); !c.OK || c.Detail != "not started" {
		t.Fatalf("before the first beat: %+v", c)
	}
	b.Mark()
	if c := LoopCheck("loop", &b, time.Minute, false); !c.OK {
		t.Fatalf("just beaten: %+v", c)
	}
	if c := LoopCheck("loop", &b, -time.Second, false); c.OK {
		t.Fatalf("stale beat passes: %+v", c)
	}
	if c := LoopCheck("loop", &b, time.Minute, true); c.OK {
		t.Fatalf("stopped passes: %+v", c)
	}
}

func TestCombineAndErrors(t *testing.T) {
	t.Parallel()
	ok := FromErrors("w", func() error { return nil }, func() error { return nil })
	bad := FromErrors("s", func() error { return nil }, func() error { return errors.New("lease unknown") })
	c := Combine(map[string]Source{"worker": ok, "scheduler": bad})
	if !c.Live().OK() {
		t.Fatal("combined liveness down")
	}
	r := c.Ready()
	if r.OK() || !strings.Contains(r.Err().Error(), "scheduler.s: lease unknown") {
		t.Fatalf("combined readiness: %+v %v", r, r.Err())
	}
}
