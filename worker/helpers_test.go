package worker_test

import (
	"github.com/jetflow-dev/jetflow"
	"time"
)

var fastBackoff = jetflow.Backoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond}
