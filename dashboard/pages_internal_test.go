package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/jetflow-dev/jetflow"
)

func TestPrettyJSON(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{``, ``},
		{`{"a":1}`, "{\n  \"a\": 1\n}"},
		{`"\u003cb\u003e \u0026 \u003e"`, `"<b> & >"`},
		{`"\\u003c"`, `"\\u003c"`}, // an escaped backslash, then text
		{`"\"\u00e9\n"`, `"\"\u00e9\n"`},
		{`not json <x>`, `not json <x>`},
	} {
		if got := prettyJSON([]byte(c.in)); got != c.want {
			t.Errorf("prettyJSON(%s) = %s, want %s", c.in, got, c.want)
		}
	}
}

func TestProgress(t *testing.T) {
	for _, c := range []struct {
		p    *jetflow.Progress
		pct  float64
		text string
	}{
		{nil, 0, ""},
		{&jetflow.Progress{Percent: 40, Processed: 4, Total: 10, Message: "halfway"}, 40, "40% · 4 / 10 · halfway"},
		{&jetflow.Progress{Processed: 1, Total: 4}, 25, "25% · 1 / 4"},
		{&jetflow.Progress{Processed: 1, Total: 3}, float64(1) / 3 * 100, "33.3% · 1 / 3"},
		{&jetflow.Progress{Processed: 7}, 0, "0% · 7 processed"},
		{&jetflow.Progress{Percent: 140}, 100, "100%"},
	} {
		pct, text := progress(c.p)
		if pct != c.pct || text != c.text {
			t.Errorf("progress(%+v) = %v %q, want %v %q", c.p, pct, text, c.pct, c.text)
		}
	}
}

// Errors map to the status a client can act on: a record jetflow did not
// write is 422, not a server error.
func TestStatusOf(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("cron x: %w", jetflow.ErrBadRecord), http.StatusUnprocessableEntity},
		{fmt.Errorf("args: %w", jetflow.ErrBadArgs), http.StatusBadRequest},
		{jetflow.ErrNotFound, http.StatusNotFound},
		{errors.New("boom"), http.StatusInternalServerError},
	} {
		if got := statusOf(c.err); got != c.want {
			t.Errorf("statusOf(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}
