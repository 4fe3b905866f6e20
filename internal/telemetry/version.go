package telemetry

import (
	"runtime/debug"
	"sync"
)

// Module is jetflow's module path, the name of its instrumentation scope.
const Module = "github.com/jetflow-dev/jetflow"

// Version is the version of jetflow's module in the running binary, from
// its build information: the tag of the dependency an application was built
// with, jetflow's own version when it is the main module (the CLI installed
// with go install ...@v1.2.3), else "(devel)".
func Version() string {
	versionOnce.Do(func() {
		version = "(devel)"
		bi, ok := debug.ReadBuildInfo()
		if !ok {
			return
		}
		m := &bi.Main
		if m.Path != Module {
			m = nil
			for _, d := range bi.Deps {
				if d.Path == Module {
					m = d
					if d.Replace != nil {
						m = d.Replace
					}
					break
				}
			}
		}
		if m != nil && m.Version != "" {
			version = m.Version
		}
	})
	return version
}

var (
	versionOnce sync.Once
	version     string
)
