// Command jetflow is the CLI of jetflow: a development server, run and cron
// management, and the benchmark.
//
//	go run ./cmd/jetflow dev                 # embedded server + scheduler + example worker
//	jetflow runs list|get|cancel|watch ...
//	jetflow enqueue <function> <json> [--after 5s]
//	jetflow functions list
//	jetflow bench
//
// Every client command takes --url (default $JETFLOW_URL, else
// nats://127.0.0.1:4222) and --prefix (default jetflow). Output goes to the
// writers carried by the command's context (see withOutput), so tests run
// commands in-process and in parallel.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// command is one subcommand. Each file registers its own in init(). run
// writes to stdout(ctx) and stderr(ctx), never to os.Stdout directly.
type command struct {
	usage string
	run   func(ctx context.Context, args []string) error
}

var commands = map[string]command{}

// longRunning commands keep going after a permissions violation (printed
// on stderr); others end at once with it.
var longRunning = map[string]bool{"dev": true, "dashboard": true, "bench": true}

func register(name, usage string, run func(ctx context.Context, args []string) error) {
	commands[name] = command{usage: usage, run: func(ctx context.Context, args []string) error {
		st := &runState{}
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		if !longRunning[name] {
			st.endRun = cancel
		}
		ctx = withRunState(ctx, st)
		return finish(ctx, run(ctx, args))
	}}
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
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "jetflow:", err)
		os.Exit(1)
	}
}

type outputKey struct{}

type outputs struct{ out, err io.Writer }

// withOutput returns a context whose commands write their output to out and
// their warnings and errors to errw (tests capture both this way).
func withOutput(ctx context.Context, out, errw io.Writer) context.Context {
	return context.WithValue(ctx, outputKey{}, outputs{out: out, err: errw})
}

// stdout is where a command prints its output: os.Stdout unless the
// context says otherwise.
func stdout(ctx context.Context) io.Writer {
	if o, ok := ctx.Value(outputKey{}).(outputs); ok && o.out != nil {
		return o.out
	}
	return os.Stdout
}

// stderr is where a command prints warnings: os.Stderr unless the context
// says otherwise.
func stderr(ctx context.Context) io.Writer {
	if o, ok := ctx.Value(outputKey{}).(outputs); ok && o.err != nil {
		return o.err
	}
	return os.Stderr
}

// newFlagSet returns a flag set for command name whose usage and errors go
// to stderr(ctx).
func newFlagSet(ctx context.Context, name, args string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr(ctx))
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: jetflow %s %s\n", name, args)
		fs.PrintDefaults()
	}
	return fs
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
