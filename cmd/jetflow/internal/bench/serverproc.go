package bench

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/jetflow-dev/jetflow/embedded"
)

// serverProcessEnv names the data directory of a bench server run in a
// process of its own (startServerProcess), and serverSyncEnv its fsync
// interval.
const (
	serverProcessEnv = "JETFLOW_BENCH_SERVER_DIR"
	serverSyncEnv    = "JETFLOW_BENCH_SERVER_SYNC_EVERY"
)

// ServeIfChild runs the server of a bench section that asked for one in
// a process of its own, and reports whether this process is that one: it
// prints the server's client URL on a line, serves until its standard
// input closes (the bench ended or stopped it), then stops the server.
func ServeIfChild() bool {
	dir := os.Getenv(serverProcessEnv)
	if dir == "" {
		return false
	}
	every, _ := time.ParseDuration(os.Getenv(serverSyncEnv))
	srv, err := embedded.Start(embedded.Options{Dir: dir, SyncEvery: every})
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench server:", err)
		os.Exit(1)
	}
	fmt.Println(srv.ClientURL())
	_, _ = io.Copy(io.Discard, os.Stdin)
	srv.Stop()
	return true
}

// startServerProcess starts a fresh server (an empty data directory) in a
// child process of this executable, as a deployment runs nats-server
// beside its schedulers and workers: its heap and collector are not the
// bench's. stop ends it and removes its data.
func startServerProcess(name string) (url string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "jetflow-bench-"+name+"-")
	if err != nil {
		return "", nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), serverProcessEnv+"="+dir, serverSyncEnv+"="+time.Duration(syncEvery.Load()).String())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	stop = func() {
		_ = stdin.Close()
		_ = cmd.Wait()
		os.RemoveAll(dir)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	url = strings.TrimSpace(line)
	if err != nil || !strings.HasPrefix(url, "nats://") {
		stop()
		return "", nil, errors.Join(fmt.Errorf("bench: server process said %q", line), err)
	}
	return url, stop, nil
}
