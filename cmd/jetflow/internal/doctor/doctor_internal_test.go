package doctor

import (
	"encoding/json"
	"testing"
	"time"
)

func TestVersionAtLeast(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		v    string
		want bool
	}{
		{"2.12.3", true}, {"2.15.2", true}, {"v2.13.0", true}, {"2.12.2", false},
		{"2.11.9", false}, {"2.12.3-beta.1", false}, {"3.0.0", true},
	} {
		if got := versionAtLeast(c.v, MinServer); got != c.want {
			t.Errorf("%s >= %s: %v", c.v, MinServer, got)
		}
	}
}

func TestMayAdmin(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, perms string
		want        bool
	}{
		{"no permissions", `{}`, true},
		{"all subjects", `{"permissions":{"publish":{"allow":[">"]}}}`, true},
		{"the JetStream API", `{"permissions":{"publish":{"allow":["$JS.API.>"]}}}`, true},
		{"a producer", `{"permissions":{"publish":{"allow":["jetflow.fn.>","$KV.jetflow_runs.>","$JS.API.STREAM.INFO.*"]}}}`, false},
		{"denied", `{"permissions":{"publish":{"allow":[">"],"deny":["$JS.API.STREAM.DELETE.>"]}}}`, false},
	} {
		var ui userInfo
		if err := json.Unmarshal([]byte(`{"data":`+c.perms+`}`), &ui); err != nil {
			t.Fatal(err)
		}
		if got, _ := mayAdmin(ui); got != c.want {
			t.Errorf("%s: may admin %v, want %v", c.name, got, c.want)
		}
	}
}

func TestSyncSettings(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		always bool
		every  time.Duration
		want   Level
	}{
		{true, 0, Pass}, {false, 10 * time.Millisecond, Pass}, {false, 0, Fail}, {false, 2 * time.Minute, Fail},
	} {
		d := &doctor{}
		d.syncSettingsFor(false, c.always, c.every)
		if got := d.out[0].Level; got != c.want {
			t.Errorf("always %v every %s: %s, want %s", c.always, c.every, got, c.want)
		}
	}
}
