// Command jetflow is the CLI of jetflow: a development server, run and cron
// management, and the benchmark.
//
//	go run ./cmd/jetflow dev                 # embedded server + scheduler + example worker
//	jetflow runs list|get|cancel ...
//	jetflow enqueue <function> <json> [--after 5s]
//	jetflow bench
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// command is one subcommand. Each file registers its own in init().
type command struct {
	usage string
	run   func(ctx context.Context, args []string) error
}

var commands = map[string]command{}

func register(name, usage string, run func(ctx context.Context, args []string) error) {
	commands[name] = command{usage: usage, run: run}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage()
		os.Exit(2)
	}
	c, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "jetflow: unknown command %q\n\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	if err := c.run(ctx, os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "jetflow:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: jetflow <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-10s %s\n", n, commands[n].usage)
	}
}

// connFlags are the flags every client command takes.
type connFlags struct {
	url    string
	prefix string
}

func (c *connFlags) add(fs *flag.FlagSet) {
	def := os.Getenv("JETFLOW_URL")
	if def == "" {
		def = nats.DefaultURL
	}
	fs.StringVar(&c.url, "url", def, "NATS server URL (env JETFLOW_URL)")
	fs.StringVar(&c.prefix, "prefix", "jetflow", "subject and bucket prefix")
}

func (c *connFlags) streams() streams.Config { return streams.Config{Prefix: c.prefix} }

// connect dials the server; the caller closes the connection.
func (c *connFlags) connect() (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(c.url, nats.Name("jetflow-cli"))
	if err != nil {
		return nil, nil, fmt.Errorf("connect %s: %w (is `jetflow dev` running?)", c.url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// parseInterleaved parses flags that may come after positional arguments.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if strings.HasPrefix(args[0], "-") && args[0] != "-" {
			continue
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
