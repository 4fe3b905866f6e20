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
func (c *connFlags) connect(ctx context.Context) (*nats.Conn, jetstream.JetStream, error) {
	s, err := c.settings()
	if err != nil {
		return nil, nil, err
	}
	addSecrets(ctx, s.secrets...)
	opts := append([]nats.Option{
		nats.Name("jetflow-cli"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) && !natsperm.Optional(err) && endOnViolation(ctx, err) {
				return
			}
			if natsperm.Optional(err) {
				return // a read from a leader, denied: the direct get answers (docs/permissions.md)
			}
			fmt.Fprintf(stderr(ctx), "jetflow: %v\n", redactString(ctx, err.Error()))
		}),
	}, s.opts...)
	nc, err := nats.Connect(s.url, opts...)
	if err != nil {
		hint := ""
		if devHintApplies(s.url, err) {
			hint = " (is `jetflow dev` running?)"
		}
		return nil, nil, fmt.Errorf("connect %s: %w%s", redactURL(s.url), err, hint)
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

// finish turns a command's error into what it prints.
func finish(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	wrapped := err
	if cause := context.Cause(ctx); cause != nil && errors.Is(cause, nats.ErrPermissionViolation) && !errors.Is(err, nats.ErrPermissionViolation) {
		if strings.Contains(msg, context.Canceled.Error()) {
			msg = strings.Replace(msg, context.Canceled.Error(), cause.Error(), 1)
		} else {
			msg = msg + ": " + cause.Error()
		}
		wrapped = errors.Join(err, cause)
	}
	msg = redactString(ctx, msg)
	if msg == err.Error() && wrapped == err {
		return err
	}
	return &cliError{msg: msg, err: wrapped}
}
