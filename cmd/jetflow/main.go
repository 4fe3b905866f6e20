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
// nats://127.0.0.1:4222) and --prefix (default jetflow); every command that
// prints takes --json (the dashboard API's field names); -h and --help print
// help on stdout at every level, --version the module version. Exit codes:
// 0 done, 1 the command failed, 2 bad usage, 3 and 4 a run watched by
// `runs watch` ended failed or canceled. Output goes to the
// writers carried by the command's context (see withOutput), so tests run
// commands in-process and in parallel.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/jetflow-dev/jetflow/cmd/jetflow/internal/bench"
	"io"
	"os"
	"os/signal"
	"regexp"
	"sort"
	"strings"
	"syscall"

	"github.com/jetflow-dev/jetflow/internal/telemetry"
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
var longRunning = map[string]bool{"dev": true, "dashboard": true, "bench": true, "doctor": true, "scheduler": true}

func register(name, usage string, run func(ctx context.Context, args []string) error) {
	commands[name] = command{usage: usage, run: commandRun(name, run)}
}

// commandRun is run as command name runs it: with its run state (secrets,
// permissions, connection) and its error as printed (see finish).
func commandRun(name string, run func(ctx context.Context, args []string) error) func(ctx context.Context, args []string) error {
	return func(ctx context.Context, args []string) error {
		st := &runState{}
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		if !longRunning[name] {
			st.endRun = cancel
		}
		st.cancel = cancel
		ctx = withRunState(ctx, st)
		err := run(ctx, args)
		var lost *connLostError
		if err == nil && errors.As(context.Cause(ctx), &lost) {
			// Ended because its connection closed: not a success.
			err = lost
		}
		return finish(ctx, err)
	}
}

func main() {
	if bench.ServeIfChild() {
		return // the server of a bench section, in its own process
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runMain(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

// Exit codes of every command.
const (
	exitOK          = 0 // done; also --help and --version
	exitError       = 1 // the command failed (connection, unknown run, refused request)
	exitUsage       = 2 // bad usage: unknown command or flag, missing argument
	exitRunFailed   = 3 // runs watch: the run ended failed
	exitRunCanceled = 4 // runs watch: the run ended canceled
)

// exitError is an error with its own exit code.
type exitCodeError struct {
	code int
	err  error
}

func (e *exitCodeError) Error() string { return e.err.Error() }
func (e *exitCodeError) Unwrap() error { return e.err }

// usageErrorf is a usage error (exit code 2).
func usageErrorf(format string, args ...any) error {
	return &exitCodeError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// runMain runs the command line args (without the program name) and
// returns the exit code; output goes to stdout(ctx) and stderr(ctx).
func runMain(ctx context.Context, args []string) int {
	if len(args) == 0 {
		usage(stderr(ctx))
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				return exitCode(ctx, c.run(ctx, append(args[2:len(args):len(args)], "--help")))
			}
		}
		usage(stdout(ctx))
		return exitOK
	case "-version", "--version", "version":
		fmt.Fprintln(stdout(ctx), "jetflow", telemetry.Version())
		return exitOK
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr(ctx), "jetflow: unknown command %q\n\n", args[0])
		usage(stderr(ctx))
		return exitUsage
	}
	return exitCode(ctx, c.run(ctx, args[1:]))
}

// exitCode prints err (if any) on stderr(ctx) and returns its exit code.
func exitCode(ctx context.Context, err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	code := exitError
	var ce *exitCodeError
	if errors.As(err, &ce) {
		code = ce.code
	}
	fmt.Fprintln(stderr(ctx), "jetflow:", printableLines(err.Error()))
	return code
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

// newFlagSet returns a flag set for command name. Its usage lists the flags
// as the README writes them (--name, -n for one letter); asked for with -h
// or --help it goes to stdout(ctx), after a bad flag to stderr(ctx).
func newFlagSet(ctx context.Context, name, args string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(&flagOutput{out: stdout(ctx), err: stderr(ctx)})
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: jetflow %s %s\n", name, args)
		if hasFlags(fs) {
			fmt.Fprintln(fs.Output(), "\nflags:")
			printFlags(fs.Output(), fs)
		}
	}
	return fs
}

// flagOutput is the output of a flag set: stderr, except while Parse runs,
// when it is held until Parse says whether help was asked for (stdout) or
// a flag was wrong (stderr).
type flagOutput struct {
	out, err io.Writer
	held     *bytes.Buffer
}

func (o *flagOutput) Write(p []byte) (int, error) {
	if o.held != nil {
		return o.held.Write(p)
	}
	return o.err.Write(p)
}

// parse is fs.Parse with the usage on the right writer. A request for help
// returns flag.ErrHelp (exit code 0), a bad flag a usage error (2).
func parse(fs *flag.FlagSet, args []string) error {
	o, ok := fs.Output().(*flagOutput)
	if !ok {
		return fs.Parse(args)
	}
	o.held = new(bytes.Buffer)
	err := fs.Parse(args)
	held := o.held.Bytes()
	o.held = nil
	switch {
	case errors.Is(err, flag.ErrHelp):
		_, _ = o.out.Write(held)
		return err
	case err != nil:
		_, _ = o.err.Write([]byte(dashFlags(string(held))))
		return &exitCodeError{code: exitUsage, err: errors.New(dashFlags(err.Error()))}
	}
	return nil
}

// flagInMessage is a flag named in the flag package's messages ("flag
// provided but not defined: -bogus", "invalid value ... for flag -limit").
var flagInMessage = regexp.MustCompile(`(defined: |flag )-([A-Za-z0-9][A-Za-z0-9_-]+)`)

// dashFlags writes the flags named in a flag package message as the
// README does: --name (one-letter flags keep one dash).
func dashFlags(msg string) string {
	return flagInMessage.ReplaceAllString(msg, "${1}--${2}")
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// printFlags lists the flags of fs as the README writes them.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		kind, text := flag.UnquoteUsage(f)
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-"
		}
		line := "  " + dash + f.Name
		if kind != "" {
			line += " " + kind
		}
		if !zeroDefault(f.DefValue) {
			text += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "%s\n      %s\n", line, text)
	})
}

// zeroDefault reports whether a flag's default, as text, is its type's
// zero value: the help does not print it.
func zeroDefault(v string) bool {
	switch v {
	case "", "0", "false", "0s":
		return true
	}
	return false
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

// subcommandHelp handles a command with subcommands called with no
// argument (its usage on stderr, a usage error) or asked for help (its
// usage on stdout, exit code 0). ok is false when args name a subcommand.
func subcommandHelp(ctx context.Context, name, text string, args []string) (bool, error) {
	if len(args) == 0 {
		fmt.Fprintln(stderr(ctx), text)
		return true, usageErrorf("%s: missing subcommand", name)
	}
	if isHelp(args[0]) {
		fmt.Fprintln(stdout(ctx), text)
		return true, flag.ErrHelp
	}
	return false, nil
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: jetflow <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].usage)
	}
	fmt.Fprintln(w, `
jetflow --version prints the version; jetflow <command> --help the flags of a
command.

Exit codes: 0 done (also --help, --version), 1 the command failed, 2 bad
usage, 3 the run watched by runs watch ended failed, 4 it ended canceled.`)
}

// parseInterleaved parses flags that may come after positional arguments.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parse(fs, args); err != nil {
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
