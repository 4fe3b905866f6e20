package embedded

import (
	"os"

	"github.com/nats-io/nats.go"
)

// Dial connects to the NATS server at url. With an empty url it starts an
// embedded server instead, with o (Dir defaults to a new temporary
// directory), the zero-setup path of examples and small services. The
// returned close func closes the connection and stops and removes what Dial
// started; the caller calls it once.
func Dial(url string, o Options) (*nats.Conn, func(), error) {
	if url != "" {
		nc, err := nats.Connect(url, nats.MaxReconnects(-1))
		if err != nil {
			return nil, nil, err
		}
		return nc, nc.Close, nil
	}
	temp := ""
	if o.Dir == "" {
		dir, err := os.MkdirTemp("", "jetflow-")
		if err != nil {
			return nil, nil, err
		}
		o.Dir, temp = dir, dir
	}
	srv, err := Start(o)
	if err != nil {
		if temp != "" {
			_ = os.RemoveAll(temp)
		}
		return nil, nil, err
	}
	nc, err := srv.Connect()
	if err != nil {
		srv.Stop()
		if temp != "" {
			_ = os.RemoveAll(temp)
		}
		return nil, nil, err
	}
	return nc, func() {
		nc.Close()
		srv.Stop()
		if temp != "" {
			_ = os.RemoveAll(temp)
		}
	}, nil
}
