package testserver

// Down stops the server, keeping its port and data directory: clients
// reconnect once Up starts it again.
func (e *Env) Down() {
	e.T.Helper()
	e.S.Stop()
}

// Up starts the server Down stopped, on the same port and data directory.
func (e *Env) Up() {
	e.T.Helper()
	e.boot(e.Port)
}
