package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/jetflow-dev/jetflow/internal/natsperm"
	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// connFlags are the flags every client command takes: where the server is
// and how to log in, named as the nats CLI names them.
type connFlags struct {
	fs       *flag.FlagSet
	url      string
	prefix   string
	user     string
	password string
	creds    string
	nkey     string
	tlsCert  string
	tlsKey   string
	tlsCA    string
	context  string
	// persistent: the command runs until stopped (dashboard, runs watch),
	// so its connection reconnects for as long as it takes.
	persistent bool
}

func (c *connFlags) add(fs *flag.FlagSet) {
	c.fs = fs
	def := os.Getenv("JETFLOW_URL")
	if def == "" {
		def = nats.DefaultURL
	}
	fs.StringVar(&c.url, "url", def, "NATS server URL, nats://[user:password@]host:port (env JETFLOW_URL)")
	fs.StringVar(&c.prefix, "prefix", "jetflow", "subject and bucket prefix")
	fs.StringVar(&c.user, "user", os.Getenv("NATS_USER"), "NATS user name, or token without --password (env NATS_USER)")
	fs.StringVar(&c.password, "password", os.Getenv("NATS_PASSWORD"), "NATS password (env NATS_PASSWORD)")
	fs.StringVar(&c.creds, "creds", "", "NATS user credentials file (JWT and NKey seed)")
	fs.StringVar(&c.nkey, "nkey", "", "NATS NKey seed file")
	fs.StringVar(&c.tlsCert, "tlscert", "", "TLS client certificate file (PEM)")
	fs.StringVar(&c.tlsKey, "tlskey", "", "TLS client private key file (PEM)")
	fs.StringVar(&c.tlsCA, "tlsca", "", "TLS certificate authority file (PEM) that signs the server's certificate")
	fs.StringVar(&c.context, "context", os.Getenv("JETFLOW_CONTEXT"), "nats CLI context name (~/.config/nats/context/NAME.json) or file; flags given override it (env JETFLOW_CONTEXT)")
}

func (c *connFlags) streams() streams.Config { return streams.Config{Prefix: c.prefix} }

// set reports whether flag name was given on the command line.
func (c *connFlags) set(name string) bool {
	found := false
	if c.fs != nil {
		c.fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	}
	return found
}

// natsContext is the part of a nats CLI context file that jetflow reads.
type natsContext struct {
	URL         string `json:"url"`
	Token       string `json:"token"`
	User        string `json:"user"`
	Password    string `json:"password"`
	Creds       string `json:"creds"`
	NKey        string `json:"nkey"`
	Cert        string `json:"cert"`
	Key         string `json:"key"`
	CA          string `json:"ca"`
	InboxPrefix string `json:"inbox_prefix"`
	TLSFirst    bool   `json:"tls_first"`
	JSDomain    string `json:"jetstream_domain"`
}

// contextPath is where the nats CLI keeps context name: a name is looked up
// in $XDG_CONFIG_HOME/nats/context (default ~/.config/nats/context); a
// path to a .json file is read as it is.
func contextPath(name string) (string, error) {
	if strings.ContainsRune(name, os.PathSeparator) || strings.HasSuffix(name, ".json") {
		return name, nil
	}
	if name == "." || name == ".." || strings.ContainsAny(name, `/\`) {
		return "", fmt.Errorf("--context %q: not a context name", name)
	}
	dir := os.Getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("--context %s: %w", name, err)
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "nats", "context", name+".json"), nil
}

func loadContext(name string) (*natsContext, error) {
	p, err := contextPath(name)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("--context %s: %w", name, err)
	}
	var nctx natsContext
	if err := json.Unmarshal(data, &nctx); err != nil {
		return nil, fmt.Errorf("--context %s: %s: %w", name, p, err)
	}
	return &nctx, nil
}

// expandHome expands a leading ~/ as the nats CLI does in context files.
func expandHome(p string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, rest)
		}
	}
	return p
}

// dialSettings are the resolved connection settings: flags over the
// context file over the defaults.
type dialSettings struct {
	url      string
	opts     []nats.Option
	jsDomain string
	secrets  []string
}

func (c *connFlags) settings() (*dialSettings, error) {
	var nctx natsContext
	if c.context != "" {
		x, err := loadContext(c.context)
		if err != nil {
			return nil, err
		}
		nctx = *x
	}
	pick := func(flagName, flagValue, ctxValue string) string {
		if c.set(flagName) || ctxValue == "" {
			return flagValue
		}
		return ctxValue
	}
	s := &dialSettings{jsDomain: nctx.JSDomain}
	s.url = pick("url", c.url, nctx.URL)
	user, password := pick("user", c.user, nctx.User), pick("password", c.password, nctx.Password)
	token := ""
	if !c.set("user") && !c.set("password") && nctx.Token != "" {
		token = nctx.Token
	}
	s.secrets = append(urlSecrets(s.url), password, token)
	switch {
	case user != "" && password != "":
		s.opts = append(s.opts, nats.UserInfo(user, password))
	case user != "":
		// As the nats CLI: a user without a password is a token.
		s.opts = append(s.opts, nats.Token(user))
		s.secrets = append(s.secrets, user)
	case password != "":
		return nil, errors.New("--password needs --user")
	case token != "":
		s.opts = append(s.opts, nats.Token(token))
	}
	if creds := expandHome(pick("creds", c.creds, nctx.Creds)); creds != "" {
		s.opts = append(s.opts, nats.UserCredentials(creds))
	}
	if nkey := expandHome(pick("nkey", c.nkey, nctx.NKey)); nkey != "" {
		o, err := nats.NkeyOptionFromSeed(nkey)
		if err != nil {
			return nil, fmt.Errorf("--nkey %s: %w", nkey, err)
		}
		s.opts = append(s.opts, o)
	}
	cert, key := expandHome(pick("tlscert", c.tlsCert, nctx.Cert)), expandHome(pick("tlskey", c.tlsKey, nctx.Key))
	if (cert == "") != (key == "") {
		return nil, errors.New("--tlscert and --tlskey go together")
	}
	if cert != "" {
		s.opts = append(s.opts, nats.ClientCert(cert, key))
	}
	if ca := expandHome(pick("tlsca", c.tlsCA, nctx.CA)); ca != "" {
		s.opts = append(s.opts, nats.RootCAs(ca))
	}
	if nctx.InboxPrefix != "" {
		s.opts = append(s.opts, nats.CustomInboxPrefix(nctx.InboxPrefix))
	}
	if nctx.TLSFirst {
		s.opts = append(s.opts, nats.TLSHandshakeFirst())
	}
	return s, nil
}

// connect dials the server; the caller closes the connection. A
// permissions violation the server reports on it ends a one-shot command
// at once (see register) or, in a long-running one, is printed.
//
// When the connection drops, a line says so, and another when it is back.
// A persistent command (c.persistent) reconnects forever; a one-shot one
// within nats.go's budget (60 attempts, 2 s apart), and its error then
// names the lost connection (see finish). A connection closed other than
// by the command (the budget spent, a login refused on reconnect) ends the
// command with an error that says so.
func (c *connFlags) connect(ctx context.Context) (*nats.Conn, jetstream.JetStream, error) {
	s, err := c.settings()
	if err != nil {
		return nil, nil, err
	}
	addSecrets(ctx, s.secrets...)
	cs := &connState{server: redactURL(s.url)}
	pol := reconnectPolicyOf(ctx)
	opts := []nats.Option{
		nats.Name("jetflow-cli"),
		nats.ErrorHandler(func(nc *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) && !natsperm.Optional(err) && endOnViolation(ctx, err) {
				return
			}
			if natsperm.Optional(err) {
				return // a read from a leader, denied: the direct get answers (docs/permissions.md)
			}
			if natsperm.Probe(err) {
				return // the dashboard asked whether its user may write: the denial is the answer
			}
			if errors.Is(err, nats.ErrConsumerNotActive) && nc.Status() != nats.CONNECTED {
				// The watches' consumers miss their heartbeats while the
				// connection is down: the disconnect line said so once.
				return
			}
			fmt.Fprintf(stderr(ctx), "jetflow: %s\n", printable(redactString(ctx, err.Error())))
		}),
		// The handlers below are for what the server or the network does,
		// not for the command's own Close.
		nats.NoCallbacksAfterClientClose(),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			from := cs.disconnected(err)
			if err == nil {
				err = errors.New("connection closed")
			}
			fmt.Fprintf(stderr(ctx), "jetflow: disconnected from %s: %s; reconnecting\n", from, printable(redactString(ctx, err.Error())))
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			to := cs.reconnected(redactURL(nc.ConnectedUrl()))
			fmt.Fprintf(stderr(ctx), "jetflow: reconnected to %s\n", to)
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			if st := stateOf(ctx); st != nil && st.cancel != nil {
				st.cancel(cs.closed(nc.LastError()))
			}
		}),
	}
	if c.persistent {
		opts = append(opts, nats.MaxReconnects(-1))
	} else if pol.attempts != 0 {
		opts = append(opts, nats.MaxReconnects(pol.attempts))
	}
	if pol.wait > 0 {
		opts = append(opts, nats.ReconnectWait(pol.wait), nats.ReconnectJitter(0, 0))
	}
	if pol.failed != nil {
		opts = append(opts, nats.ReconnectErrHandler(func(*nats.Conn, error) { pol.failed() }))
	}
	opts = append(opts, s.opts...)
	nc, err := nats.Connect(s.url, opts...)
	if err != nil {
		hint := ""
		if devHintApplies(s.url, err) {
			hint = " (is `jetflow dev` running?)"
		}
		return nil, nil, fmt.Errorf("connect %s: %w%s", redactURL(s.url), err, hint)
	}
	cs.connected(nc, redactURL(nc.ConnectedUrl()))
	if st := stateOf(ctx); st != nil {
		st.setConn(cs)
	}
	var js jetstream.JetStream
	if s.jsDomain != "" {
		js, err = jetstream.NewWithDomain(nc, s.jsDomain)
	} else {
		js, err = jetstream.New(nc)
	}
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// connState follows one command's connection: the server it is connected
// to, and why it was lost, if it was.
type connState struct {
	mu     sync.Mutex
	nc     *nats.Conn
	server string // redacted URL of the server connected to (or asked for)
	down   error  // why it disconnected, while it reconnects; nil when connected
	lost   *connLostError
}

func (cs *connState) connected(nc *nats.Conn, server string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.nc = nc
	if server != "" {
		cs.server = server
	}
}

// disconnected records err and returns the server that was lost.
func (cs *connState) disconnected(err error) string {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if err == nil {
		err = errors.New("connection closed")
	}
	cs.down = err
	return cs.server
}

func (cs *connState) reconnected(server string) string {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.down = nil
	if server != "" {
		cs.server = server
	}
	return cs.server
}

// closed records that the connection closed for good (not by the command),
// with the connection's last error, and returns the error that says so.
func (cs *connState) closed(last error) *connLostError {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.lost == nil {
		cs.lost = &connLostError{server: cs.server, cause: cs.down, final: last, closed: true}
	}
	return cs.lost
}

// lostError reports the lost connection a command's error (err, nil to
// ask whether it is lost now) may be due to: closed for good, or down at
// the time. Nil if it was up.
func (cs *connState) lostError(err error) *connLostError {
	cs.mu.Lock()
	lost, down, nc := cs.lost, cs.down, cs.nc
	cs.mu.Unlock()
	switch {
	case lost != nil:
		return lost
	case err == nil && nc != nil && nc.IsClosed():
		// Closed, not by the command (which has not closed it yet): the
		// closed handler may not have run yet.
		return cs.closed(nc.LastError())
	case err != nil && errors.Is(err, nats.ErrConnectionClosed):
		return &connLostError{server: cs.server, cause: down, closed: true}
	case down != nil:
		return &connLostError{server: cs.server, cause: down}
	}
	return nil
}

// connLostError is a connection to the server that was lost: down when a
// one-shot command failed, or closed for good.
type connLostError struct {
	server string
	cause  error // why it disconnected (nil if not known)
	final  error // the connection's last error when it closed
	closed bool
}

func (e *connLostError) Error() string {
	msg := "lost the connection to " + e.server
	if e.cause != nil {
		msg += ": " + e.cause.Error()
	}
	switch {
	case !e.closed:
		return msg + " (reconnecting)"
	case e.final == nil, errors.Is(e.final, nats.ErrNoServers), errors.Is(e.final, nats.ErrConnectionClosed):
		return msg + "; gave up reconnecting"
	case e.cause != nil && e.final.Error() == e.cause.Error():
		return msg + "; connection closed"
	}
	return msg + "; connection closed: " + e.final.Error()
}

func (e *connLostError) Unwrap() []error {
	var errs []error
	for _, err := range []error{e.cause, e.final} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if e.closed {
		errs = append(errs, nats.ErrConnectionClosed)
	}
	return errs
}

// reconnectPolicy overrides nats.go's reconnect timing (tests).
type reconnectPolicy struct {
	wait     time.Duration // between attempts at one server; jitter off
	attempts int           // one-shot commands' budget
	failed   func()        // called after each failed attempt
}

type reconnectKey struct{}

func withReconnectPolicy(ctx context.Context, p reconnectPolicy) context.Context {
	return context.WithValue(ctx, reconnectKey{}, p)
}

func reconnectPolicyOf(ctx context.Context) reconnectPolicy {
	p, _ := ctx.Value(reconnectKey{}).(reconnectPolicy)
	return p
}

// connLost is the lost connection that ended the command, if it did; for
// a command that has not closed its connection yet.
func connLost(ctx context.Context) *connLostError {
	var lost *connLostError
	if errors.As(context.Cause(ctx), &lost) {
		return lost
	}
	if st := stateOf(ctx); st != nil {
		if cs := st.getConn(); cs != nil {
			if lost := cs.lostError(nil); lost != nil && lost.closed {
				return lost
			}
		}
	}
	return nil
}

// devHintApplies reports whether the failure to connect to rawURL may mean
// that `jetflow dev` is not running: nothing answered (connection refused)
// on the address dev listens on by default, the CLI's default URL. A wrong
// host, a TLS or login error, or any other URL gets no hint.
func devHintApplies(rawURL string, err error) bool {
	if !errors.Is(err, nats.ErrNoServers) {
		return false
	}
	u, perr := url.Parse(rawURL)
	if perr != nil || u.Scheme != "nats" || u.Port() != "4222" {
		return false
	}
	switch u.Hostname() {
	case "127.0.0.1", "localhost", "::1":
		return true
	}
	return false
}

// displayURL is the server URL to print: the one connected to, or the one
// asked for, without credentials.
func (c *connFlags) displayURL() string {
	if s, err := c.settings(); err == nil {
		return redactURL(s.url)
	}
	return redactURL(c.url)
}

var userinfoRe = regexp.MustCompile(`//([^@/]*)@`)

// redacted replaces passwords and tokens in URLs and messages.
const redacted = "xxxxx"

// redactURL returns u (a comma-separated list of URLs, as nats.Connect
// takes) without passwords or tokens: nats://user:xxxxx@host,
// nats://xxxxx@host for a token.
func redactURL(u string) string {
	parts := strings.Split(u, ",")
	for i, p := range parts {
		pu, err := url.Parse(strings.TrimSpace(p))
		if err != nil || pu.User == nil {
			parts[i] = userinfoRe.ReplaceAllString(p, "//"+redacted+"@")
			continue
		}
		if _, ok := pu.User.Password(); ok {
			pu.User = url.UserPassword(pu.User.Username(), redacted)
		} else {
			pu.User = url.User(redacted)
		}
		parts[i] = pu.String()
	}
	return strings.Join(parts, ",")
}

// urlSecrets are the passwords and tokens in u.
func urlSecrets(u string) []string {
	var out []string
	for _, m := range userinfoRe.FindAllStringSubmatch(u, -1) {
		info := m[1]
		_, pass, ok := strings.Cut(info, ":")
		if !ok {
			out = append(out, info)
			if dec, err := url.PathUnescape(info); err == nil {
				out = append(out, dec)
			}
			continue
		}
		out = append(out, pass)
		if dec, err := url.PathUnescape(pass); err == nil {
			out = append(out, dec)
		}
	}
	return out
}

// The secrets and the permissions hook of one command run travel in its
// context (set by register), so that parallel in-process runs (the tests)
// do not mix.
type runStateKey struct{}

type runState struct {
	secrets []string
	// endRun, for one-shot commands, ends the command with the violation.
	endRun context.CancelCauseFunc
	// cancel ends the command whose connection closed under it.
	cancel context.CancelCauseFunc

	mu   sync.Mutex
	conn *connState // the command's connection
}

func (st *runState) setConn(cs *connState) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.conn = cs
}

func (st *runState) getConn() *connState {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.conn
}

func withRunState(ctx context.Context, st *runState) context.Context {
	return context.WithValue(ctx, runStateKey{}, st)
}

func stateOf(ctx context.Context) *runState {
	st, _ := ctx.Value(runStateKey{}).(*runState)
	return st
}

func addSecrets(ctx context.Context, secrets ...string) {
	st := stateOf(ctx)
	if st == nil {
		return
	}
	for _, s := range secrets {
		if s != "" {
			st.secrets = append(st.secrets, s)
		}
	}
}

func endOnViolation(ctx context.Context, err error) bool {
	st := stateOf(ctx)
	if st == nil || st.endRun == nil {
		return false
	}
	st.endRun(err)
	return true
}

// redactString replaces every secret of the run in s, and the userinfo of
// any URL.
func redactString(ctx context.Context, s string) string {
	if st := stateOf(ctx); st != nil {
		for _, sec := range st.secrets {
			// A very short secret would garble the message wherever its
			// letters occur; URLs are redacted below whatever their length.
			if len(sec) >= 4 {
				s = strings.ReplaceAll(s, sec, redacted)
			}
		}
	}
	return userinfoRe.ReplaceAllStringFunc(s, func(m string) string {
		if strings.Contains(m, ":") {
			user, _, _ := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(m, "//"), "@"), ":")
			return "//" + user + ":" + redacted + "@"
		}
		return "//" + redacted + "@"
	})
}

// cliError is a command's error as printed: secrets redacted, and a
// permissions violation named in place of "context canceled". It matches
// what the original matched.
type cliError struct {
	msg string
	err error
}

func (e *cliError) Error() string { return e.msg }
func (e *cliError) Unwrap() error { return e.err }

// finish turns a command's error into what it prints: a permissions
// violation, or the lost connection, that ended or failed the command is
// named in it.
func finish(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	wrapped := err
	var extra error
	var lost *connLostError
	if cause := context.Cause(ctx); cause != nil && errors.Is(cause, nats.ErrPermissionViolation) && !errors.Is(err, nats.ErrPermissionViolation) {
		extra = cause
	} else if !errors.As(err, &lost) {
		if errors.As(context.Cause(ctx), &lost) {
			extra = lost
		} else if st := stateOf(ctx); st != nil {
			if cs := st.getConn(); cs != nil {
				if l := cs.lostError(err); l != nil {
					extra = l
				}
			}
		}
	}
	if extra != nil {
		switch {
		case strings.Contains(msg, context.Canceled.Error()):
			msg = strings.Replace(msg, context.Canceled.Error(), extra.Error(), 1)
		case !strings.Contains(msg, extra.Error()):
			msg = msg + ": " + extra.Error()
		}
		wrapped = errors.Join(err, extra)
	}
	msg = redactString(ctx, msg)
	if msg == err.Error() && wrapped == err {
		return err
	}
	return &cliError{msg: msg, err: wrapped}
}
