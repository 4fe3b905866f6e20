package kv

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// ArgsLimit is the most bytes of args a run's record can hold on a
// connection whose server takes messages of up to maxPayload bytes: the
// max payload less room for the record's other fields.
func ArgsLimit(maxPayload int64) int {
	if maxPayload > 8192 {
		return int(maxPayload) - 4096
	}
	return 1 << 20
}

// BodySummary is what a record stores in place of a message body b that
// it cannot keep as is (not JSON, or larger than limit bytes): its size,
// its SHA-256 and as much of it as fits a quarter of limit, base64, so
// that a hostile or broken body still leaves a record within the server's
// max payload.
func BodySummary(b []byte, limit int) json.RawMessage {
	keep := min(len(b), 3*(limit/4)/4) // base64 of what is kept fits in a quarter of the limit
	sum := sha256.Sum256(b)
	v, _ := json.Marshal(struct {
		NotJSON   bool   `json:"notJSON"`
		Size      int    `json:"size"`
		SHA256    string `json:"sha256"`
		Base64    []byte `json:"base64"`
		Truncated bool   `json:"truncated,omitempty"`
	}{!json.Valid(b), len(b), hex.EncodeToString(sum[:]), b[:keep], keep < len(b)})
	return v
}
