package main

import (
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
)

func TestDescribeText(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	holder := func(owner string, mode lockdv1.LockMode, token uint64) *lockdv1.LockHolder {
		return &lockdv1.LockHolder{Owner: owner, Mode: mode, HoldCount: 1, FencingToken: token,
			ExpireTime: timestamppb.New(now.Add(20 * time.Second)), TtlLeft: durationpb.New(20 * time.Second), Client: "ops"}
	}
	for _, tc := range []struct {
		name string
		info *lockdv1.LockInfo
		want []string
	}{
		{"a free key", &lockdv1.LockInfo{Key: "k"}, []string{"kind:     free (nobody holds it)", "holder:   none", "waiting:  0 writer(s)"}},
		{"an election", &lockdv1.LockInfo{Key: "sched", Kind: lockdv1.LockKind_LOCK_KIND_ELECTION, WaitingWriters: 2,
			Holders:  []*lockdv1.LockHolder{holder("node-a", lockdv1.LockMode_LOCK_MODE_WRITE, 7)},
			Election: &lockdv1.ElectionState{HasLeader: true, Leader: "node-a", Term: 7, Value: "10.0.0.1"}},
			[]string{"kind:     election", `leader:   node-a (term 7, value "10.0.0.1")`, "node-a (client ops): write, hold_count 1, fencing_token 7, expires in 20s (2026-01-02T03:04:25Z)", "waiting:  2 writer(s)"}},
		{"a semaphore", &lockdv1.LockInfo{Key: "pool", Kind: lockdv1.LockKind_LOCK_KIND_SEMAPHORE,
			Holders:   []*lockdv1.LockHolder{holder("a", lockdv1.LockMode_LOCK_MODE_PERMIT, 1), holder("b", lockdv1.LockMode_LOCK_MODE_PERMIT, 2)},
			Semaphore: &lockdv1.SemaphoreState{Limit: 3, PermitsInUse: 2}, LastFencingToken: 2},
			[]string{"kind:     semaphore", "permits:  2 of 3 in use", "holder:   a (client ops): permit", "          b (client ops): permit", "last fencing_token: 2"}},
	} {
		got := describeText(tc.info, now)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: printed\n%s\nlacking %q", tc.name, got, w)
			}
		}
	}
}

// TestEveryInspectFlagIsInTheManual keeps the command line section of
// docs/clients.md in step with lockd inspect's flags.
func TestEveryInspectFlagIsInTheManual(t *testing.T) {
	t.Parallel()
	section := manualSection(t, "clients.md", "## The command line")
	var out strings.Builder
	if code := runInspect([]string{"-help"}, func(string) string { return "" }, io.Discard, &out); code != 0 {
		t.Fatalf("-help exited %d", code)
	}
	flags := regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(out.String(), -1)
	if len(flags) < 8 {
		t.Fatalf("found %d flags in -help output:\n%s", len(flags), out.String())
	}
	for _, m := range flags {
		if name := m[1]; !strings.Contains(section, "`--"+name+"`") {
			t.Errorf("lockd inspect flag --%s has no line in docs/clients.md's command line section", name)
		}
	}
}
