package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const tokenUsage = "usage: lockd token [flags] APP"

// runToken is lockd token: it prints APP's access_token. The exit status is
// 0, 1 when lockd could not give the token, or 2 for bad arguments.
func runToken(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var f clientFlags
	fs := newClientFlagSet("lockd token", tokenUsage, "Prints the app's current access_token, as lockd serves it.", stderr)
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitUsage
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, tokenUsage)
		return exitUsage
	}
	c, err := f.dial(getenv)
	if err != nil {
		fmt.Fprintln(stderr, "lockd token:", err)
		return exitUsage
	}
	defer c.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	token, _, err := c.AccessToken(ctx, fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, "lockd token:", err)
		return 1
	}
	fmt.Fprintln(stdout, token)
	return 0
}
