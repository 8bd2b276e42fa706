package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/lockd/lockd/client"
	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
)

const inspectUsage = "usage: lockd inspect [flags] KEY"

// runInspect is lockd inspect: it prints who holds KEY and who waits for
// it (AdminService.DescribeLock). The exit status is 0 (held or not), 1
// when lockd could not answer, or 2 for bad arguments.
func runInspect(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var f clientFlags
	var asJSON bool
	fs := newClientFlagSet("lockd inspect", inspectUsage, "Prints who holds KEY (a lock, election or semaphore) and who waits for it.", stderr)
	f.register(fs)
	fs.BoolVar(&asJSON, "json", false, "print DescribeLock's answer as JSON")
	return runOneArg("lockd inspect", inspectUsage, fs, &f, args, getenv, stderr, func(ctx context.Context, c *client.Client, key string) int {
		info, err := c.DescribeLock(ctx, key)
		if err != nil {
			fmt.Fprintln(stderr, "lockd inspect:", err)
			return 1
		}
		return printLockInfo(info, asJSON, stdout, stderr)
	})
}

// printLockInfo prints info as text, or as DescribeLock's JSON.
func printLockInfo(info *lockdv1.LockInfo, asJSON bool, stdout, stderr io.Writer) int {
	if asJSON {
		b, err := protojson.MarshalOptions{Multiline: true, EmitUnpopulated: true}.Marshal(info)
		if err != nil {
			fmt.Fprintln(stderr, "lockd inspect:", err)
			return 1
		}
		fmt.Fprintln(stdout, string(b))
		return 0
	}
	fmt.Fprint(stdout, describeText(info, time.Now()))
	return 0
}

// describeText renders a LockInfo for people.
func describeText(info *lockdv1.LockInfo, now time.Time) string {
	var b strings.Builder
	kind := strings.ToLower(strings.TrimPrefix(info.GetKind().String(), "LOCK_KIND_"))
	if info.GetKind() == lockdv1.LockKind_LOCK_KIND_UNSPECIFIED {
		kind = "free (nobody holds it)"
	}
	fmt.Fprintf(&b, "key:      %s\nkind:     %s\n", info.GetKey(), kind)
	if e := info.GetElection(); e != nil {
		fmt.Fprintf(&b, "leader:   %s (term %d", e.GetLeader(), e.GetTerm())
		if e.GetValue() != "" {
			fmt.Fprintf(&b, ", value %q", e.GetValue())
		}
		b.WriteString(")\n")
	}
	if s := info.GetSemaphore(); s != nil {
		fmt.Fprintf(&b, "permits:  %d of %d in use\n", s.GetPermitsInUse(), s.GetLimit())
	}
	for i, h := range info.GetHolders() {
		label := "holder:  "
		if i > 0 {
			label = "         "
		}
		mode := strings.ToLower(strings.TrimPrefix(h.GetMode().String(), "LOCK_MODE_"))
		owner := h.GetOwner()
		if h.GetClient() != "" {
			owner += " (client " + h.GetClient() + ")"
		}
		left := h.GetTtlLeft().AsDuration().Round(time.Millisecond)
		fmt.Fprintf(&b, "%s %s: %s, hold_count %d, fencing_token %d, expires in %v (%s)\n", label, owner, mode,
			h.GetHoldCount(), h.GetFencingToken(), left, h.GetExpireTime().AsTime().In(now.Location()).Format(time.RFC3339))
	}
	if len(info.GetHolders()) == 0 {
		b.WriteString("holder:   none\n")
	}
	fmt.Fprintf(&b, "waiting:  %d writer(s)\n", info.GetWaitingWriters())
	if t := info.GetLastFencingToken(); t != 0 {
		fmt.Fprintf(&b, "last fencing_token: %d\n", t)
	}
	return b.String()
}
