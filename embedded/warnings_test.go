package embedded_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/embedded"
	"github.com/jetflow-dev/jetflow/internal/testserver"
)

// Options.Warnings receives the server's warnings (here: a password in
// plain text), and nothing of its notices.
func TestWarnings(t *testing.T) {
	t.Parallel()
	var buf testserver.Buffer
	start(t, embedded.Options{User: "app", Password: "pa55word", Warnings: &buf})
	testserver.Eventually(t, 10*time.Second, "the plaintext password warning", func() bool {
		return strings.Contains(buf.String(), "nats-server warning: Plaintext passwords detected")
	})
	if s := buf.String(); strings.Contains(s, "Server is ready") || strings.Contains(s, "Starting nats-server") {
		t.Fatalf("notices written too:\n%s", s)
	}
}
