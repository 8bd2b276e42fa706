package main

import (
	"context"
	"fmt"
	"io"

	"github.com/lockd/lockd/client"
)

const tokenUsage = "usage: lockd token [flags] APP"

// runToken is lockd token: it prints APP's access_token. The exit status is
// 0, 1 when lockd could not give the token, or 2 for bad arguments.
func runToken(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var f clientFlags
	fs := newClientFlagSet("lockd token", tokenUsage, "Prints the app's current access_token, as lockd serves it.", stderr)
	f.register(fs)
	return runOneArg("lockd token", tokenUsage, fs, &f, args, getenv, stderr, func(ctx context.Context, c *client.Client, app string) int {
		token, _, err := c.AccessToken(ctx, app)
		if err != nil {
			fmt.Fprintln(stderr, "lockd token:", err)
			return 1
		}
		fmt.Fprintln(stdout, token)
		return 0
	})
}
