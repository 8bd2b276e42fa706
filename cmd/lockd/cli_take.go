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
	"time"

	"github.com/lockd/lockd/client"
)

const takeUsage = "usage: lockd take [flags] KEY --limit N --period D [--burst B] [--cost C] [--wait D]"

// runTake is lockd take: it spends cost from KEY's rate limiter, so shell
// jobs of a whole fleet share one budget. The exit status is 0 when the
// cost was allowed (go ahead), 75 when it was not (within --wait; stderr
// says when it would be), 1 when lockd could not decide, 2 for bad
// arguments. Flags may come before or after KEY.
func runTake(args []string, getenv func(string) string, _, stderr io.Writer) int {
	var (
		f     clientFlags
		limit uint
		burst uint
		cost  uint
		per   time.Duration
		wait  time.Duration
	)
	fs := newClientFlagSet("lockd take", takeUsage,
		"Spends cost from KEY's fleet-wide rate limit (at most limit per period, bursts of up to burst). Exit status: 0 allowed, 75 not allowed within --wait, 1 lockd could not decide, 2 bad arguments.", stderr)
	f.register(fs)
	fs.UintVar(&limit, "limit", 0, "cost allowed per period (required; every caller of KEY gives the same)")
	fs.DurationVar(&per, "period", 0, "span the limit applies to, e.g. 1m (required)")
	fs.UintVar(&burst, "burst", 0, "cost allowed at once after an idle spell (default: the limit)")
	fs.UintVar(&cost, "cost", 1, "cost of this call")
	fs.DurationVar(&wait, "wait", 0, "how long to wait for the cost to be allowed (0: decide at once)")
	key, err := parseInterleaved(fs, args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return exitUsage
	}
	if key == "" {
		fmt.Fprintln(stderr, takeUsage)
		return exitUsage
	}
	for _, v := range []struct {
		name string
		n    uint
	}{{"--limit", limit}, {"--burst", burst}, {"--cost", cost}} {
		if v.n > 1<<32-1 {
			fmt.Fprintf(stderr, "lockd take: %s %d is too large\n", v.name, v.n)
			return exitUsage
		}
	}
	switch {
	case limit == 0:
		fmt.Fprintln(stderr, "lockd take: --limit is required (the cost allowed per period)")
		return exitUsage
	case per <= 0:
		fmt.Fprintln(stderr, "lockd take: --period is required (e.g. --period 1m)")
		return exitUsage
	case cost == 0:
		fmt.Fprintln(stderr, "lockd take: --cost must be at least 1")
		return exitUsage
	case wait < 0:
		fmt.Fprintln(stderr, "lockd take: --wait must not be negative")
		return exitUsage
	}
	c, err := f.dial(getenv)
	if err != nil {
		fmt.Fprintln(stderr, "lockd take:", err)
		return exitUsage
	}
	defer c.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	rate := client.Rate{Limit: uint32(limit), Period: per, Burst: uint32(burst)}
	withCost := client.WithCost(uint32(cost))
	var d client.Decision
	if wait > 0 {
		wctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		d, err = c.Wait(wctx, key, rate, withCost)
		if errors.Is(err, client.ErrRateLimited) {
			err = nil
		}
	} else {
		d, err = c.Take(ctx, key, rate, withCost)
	}
	if err != nil {
		fmt.Fprintln(stderr, "lockd take:", err)
		return 1
	}
	if !d.Allowed {
		fmt.Fprintf(stderr, "lockd take: %q not allowed; allowed again in %v\n", key, d.RetryAfter)
		return exitNotAcquired
	}
	return 0
}

// parseInterleaved parses args with fs, flags before or after the one
// positional argument, which it returns ("" when none); after "--" every
// argument is positional. The error is flag.ErrHelp for -help, or says
// (having printed it) what is wrong.
func parseInterleaved(fs *flag.FlagSet, args []string, stderr io.Writer) (string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return "", err
		}
		rest := fs.Args()
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	switch len(positional) {
	case 0:
		return "", nil
	case 1:
		return positional[0], nil
	}
	err := fmt.Errorf("%s: one KEY, got %d arguments", fs.Name(), len(positional))
	fmt.Fprintln(stderr, err)
	return "", err
}
