package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/lockd/lockd/client"
	"github.com/lockd/lockd/internal/config"
)

// subcommand is one of lockd's client subcommands.
type subcommand struct {
	name  string
	about string // one line, for lockd --help
	run   func(args []string, getenv func(string) string, stdout, stderr io.Writer) int
}

// subcommands are lockd's client subcommands, in the order lockd --help
// lists them; lockd with none of them (or with serve) runs the server.
var subcommands = []subcommand{
	{"lock", "run a command while holding a lock, or one of N permits of a semaphore", runLock},
	{"token", "print an app's access_token", runToken},
	{"inspect", "print who holds a key and how many wait for it", runInspect},
	{"take", "spend from a fleet-wide rate limit; exit 0 when allowed, 75 when not", runTake},
}

// clientCommand runs the client subcommand args name, or prints lockd's
// help (for help, -h, -help or --help, and for an unknown subcommand, then
// exiting 2), and reports false when args name none of them: lockd then
// serves ("serve" is dropped from args).
func clientCommand(args []string, getenv func(string) string, stdout, stderr io.Writer) (code int, ok bool, serveArgs []string) {
	if len(args) == 0 {
		return 0, false, args
	}
	switch name := args[0]; name {
	case "serve":
		return 0, false, args[1:]
	case "help", "-h", "-help", "--help":
		printHelp(stdout)
		return 0, true, nil
	default:
		for _, c := range subcommands {
			if c.name == name {
				return c.run(args[1:], getenv, stdout, stderr), true, nil
			}
		}
		if !strings.HasPrefix(name, "-") {
			fmt.Fprintf(stderr, "lockd: unknown subcommand %q\n\n", name)
			printHelp(stderr)
			return exitUsage, true, nil
		}
	}
	return 0, false, args
}

// printHelp writes lockd's help to w: its subcommands, then the server's
// flags with their built-in defaults.
func printHelp(w io.Writer) {
	// parseFlags prints the help through its flag set's Usage.
	_, _, _ = parseFlags([]string{"-help"}, func(string) string { return "" }, w)
}

// writeUsage writes the usage of lockd, its subcommands and the server's
// flags (fs) to fs's output.
func writeUsage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprint(w, `usage: lockd [serve] [flags]            run the server
       lockd SUBCOMMAND [flags] ARGS...  call a running lockd

Subcommands:
  serve    run the server (the default: lockd with no subcommand serves)
`)
	for _, c := range subcommands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.about)
	}
	fmt.Fprint(w, `  help     print this help

"lockd SUBCOMMAND --help" lists a subcommand's flags. Every server flag can
also be set in the environment as LOCKD_ and its name in upper snake case
(--http-listen: LOCKD_HTTP_LISTEN); the command line wins. The manual is in
the docs/ directory of lockd's repository.

Server flags:
`)
	fs.PrintDefaults()
}

// runOneArg runs a client subcommand that takes one argument (lockd token
// APP, lockd inspect KEY): it parses args with fs, dials lockd and calls
// call with the argument and a context that ends on SIGINT or SIGTERM.
// Bad arguments or a failed dial exit 2 (exitUsage), -help 0.
func runOneArg(name, usage string, fs *flag.FlagSet, f *clientFlags, args []string, getenv func(string) string, stderr io.Writer,
	call func(ctx context.Context, c *client.Client, arg string) int) int {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitUsage
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, usage)
		return exitUsage
	}
	c, err := f.dial(getenv)
	if err != nil {
		fmt.Fprintln(stderr, name+":", err)
		return exitUsage
	}
	defer c.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return call(ctx, c, fs.Arg(0))
}

// newClientFlagSet returns the flag set of a client subcommand, whose
// -help prints usage and about, then the flags.
func newClientFlagSet(name, usage, about string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, usage)
		fmt.Fprintln(stderr, about)
		fs.PrintDefaults()
	}
	return fs
}

// clientFlags are how the client subcommands reach lockd.
type clientFlags struct {
	addr          string
	tokenFile     string
	tls           bool
	tlsCA         string
	tlsCert       string
	tlsKey        string
	tlsServerName string
}

func (f *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.addr, "addr", "127.0.0.1:50051", "lockd address; a comma list of replicas to fail over between")
	fs.StringVar(&f.tokenFile, "token-file", "", "file holding the bearer token (default: the LOCKD_TOKEN environment variable)")
	fs.BoolVar(&f.tls, "tls", false, "connect over TLS, verifying lockd's certificate with the system's roots")
	fs.StringVar(&f.tlsCA, "tls-ca", "", "PEM CA bundle to verify lockd's certificate with (implies --tls)")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "PEM client certificate for mTLS (implies --tls; with --tls-key)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&f.tlsServerName, "tls-server-name", "", "name to expect in lockd's certificate (default: the host of --addr)")
}

// dial returns a client as the flags say, with extra options; the bearer
// token comes from --token-file, else from LOCKD_TOKEN.
func (f *clientFlags) dial(getenv func(string) string, extra ...client.Option) (*client.Client, error) {
	opts := extra
	token := getenv("LOCKD_TOKEN")
	if f.tokenFile != "" {
		t, err := config.ReadSecretFile(f.tokenFile)
		if t = strings.TrimSpace(t); err == nil && t == "" {
			err = errors.New("the file named there is empty")
		}
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		token = t
	}
	if token != "" {
		opts = append(opts, client.WithBearerToken(token))
	}
	if f.tls || f.tlsCA != "" || f.tlsCert != "" || f.tlsKey != "" || f.tlsServerName != "" {
		cfg, err := f.tlsConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, client.WithTLS(cfg))
	}
	var addrs []string
	for _, a := range strings.Split(f.addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return nil, errors.New("--addr: no address given")
	}
	return client.New(addrs, opts...)
}

func (f *clientFlags) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.tlsServerName}
	if f.tlsCA != "" {
		pem, err := os.ReadFile(f.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca: no PEM certificate in %s", f.tlsCA)
		}
	}
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	if f.tlsCert != "" {
		pair, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert, --tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
