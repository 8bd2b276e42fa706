//go:build unix

package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// sentinelMasterName is the name the sentinels monitor the master under.
	sentinelMasterName = "lockd-master"
	// sentinelTimeout bounds topology convergence and failover.
	sentinelTimeout = 90 * time.Second
	// sentinelCount is how many sentinels watch the master.
	sentinelCount = 3
)

// Sentinel is a master with one replica, watched by three Sentinels (quorum
// 2), started by [StartSentinel].
type Sentinel struct {
	nodes     []*Server // data nodes; nodes[0] was the first master
	sentinels []*Server

	mu     sync.Mutex
	master string // the master's address as last confirmed by the harness
}

// StartSentinel starts a master, a replica of it and three Sentinels
// monitoring it as [Sentinel.MasterName] with quorum 2, a down-after of 1s
// and a failover timeout of 10s. It returns once the replica is in sync and
// every sentinel knows the master, the replica and the other sentinels.
// Everything is killed when the test ends.
func StartSentinel(tb testing.TB) *Sentinel {
	tb.Helper()
	// No delay before a diskless full sync: replicas sync at once.
	fast := WithArgs("--repl-diskless-sync-delay", "0")
	master := Start(tb, fast)
	replica := Start(tb, fast, WithArgs("--replicaof", "127.0.0.1", strconv.Itoa(master.Port())))
	st := &Sentinel{nodes: []*Server{master, replica}, master: master.Addr()}

	waitFor(tb, sentinelTimeout, "replica in sync with the master", func(ctx context.Context) error {
		return replicaInSync(ctx, master.Addr(), replica.Addr())
	})
	for range sentinelCount {
		st.sentinels = append(st.sentinels, Start(tb, func(o *options) {
			o.sentinel = func(s *Server) { writeSentinelConf(tb, s, master.Port()) }
		}))
	}
	waitFor(tb, sentinelTimeout, "sentinels see master, replica and each other", func(ctx context.Context) error {
		return st.checkSentinels(ctx, master.Addr(), replica.Addr())
	})
	return st
}

// MasterName returns the name the sentinels monitor the master under.
func (st *Sentinel) MasterName() string { return sentinelMasterName }

// SentinelAddrs returns the sentinels' addresses.
func (st *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(st.sentinels))
	for i, s := range st.sentinels {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Sentinels returns the sentinel servers.
func (st *Sentinel) Sentinels() []*Server { return append([]*Server(nil), st.sentinels...) }

// Nodes returns the data servers: the first master and its replica, in the
// order they were started (the roles change with failovers).
func (st *Sentinel) Nodes() []*Server { return append([]*Server(nil), st.nodes...) }

// MasterAddr returns the master's address as the first sentinel that answers
// reports it, or the harness's last known master when none answers.
func (st *Sentinel) MasterAddr() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range st.sentinels {
		if addr, err := masterBySentinel(ctx, s.Addr()); err == nil {
			return addr
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.master
}

// Master returns the data server that is the master now (by
// [Sentinel.MasterAddr]), or nil if none of them is.
func (st *Sentinel) Master() *Server {
	addr := st.MasterAddr()
	for _, n := range st.nodes {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// FailoverClient returns a go-redis Sentinel-backed client for the master,
// closed when the test ends. It honours context deadlines.
func (st *Sentinel) FailoverClient(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            sentinelMasterName,
		SentinelAddrs:         st.SentinelAddrs(),
		ContextTimeoutEnabled: true,
	})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Failover forces a failover with SENTINEL FAILOVER and waits until every
// sentinel reports the new master and the new master accepts writes. The old
// master, if it still runs, is then made a replica of the new one at once
// (Sentinel itself would do that only after several seconds), so writes that
// still reach it fail with READONLY instead of being lost.
func (st *Sentinel) Failover(tb testing.TB) {
	tb.Helper()
	st.mu.Lock()
	defer st.mu.Unlock()
	old := st.master

	waitFor(tb, sentinelTimeout, "a sentinel accepts SENTINEL FAILOVER", func(ctx context.Context) error {
		var errs []error
		for _, s := range st.sentinels {
			_, err := command(ctx, s.Addr(), "SENTINEL", "FAILOVER", sentinelMasterName)
			if err == nil {
				return nil
			}
			// NOGOODSLAVE: the sentinel has no fresh view of a healthy
			// replica yet; INPROG: a failover is still running.
			errs = append(errs, fmt.Errorf("%s: %w", s.Addr(), err))
		}
		return errors.Join(errs...)
	})

	var next string
	waitFor(tb, sentinelTimeout, "all sentinels report the new master", func(ctx context.Context) error {
		next = ""
		for _, s := range st.sentinels {
			addr, err := masterBySentinel(ctx, s.Addr())
			if err != nil {
				return fmt.Errorf("sentinel %s: %w", s.Addr(), err)
			}
			if addr == old {
				return fmt.Errorf("sentinel %s still reports %s", s.Addr(), old)
			}
			if next != "" && addr != next {
				return fmt.Errorf("sentinels disagree: %s and %s", next, addr)
			}
			next = addr
		}
		return nil
	})

	waitFor(tb, sentinelTimeout, "new master "+next+" accepts writes", func(ctx context.Context) error {
		v, err := command(ctx, next, "ROLE")
		if err != nil {
			return err
		}
		if role, _ := v.([]any); len(role) == 0 || role[0] != "master" {
			return fmt.Errorf("ROLE = %v", v)
		}
		// DEL is a write that leaves nothing behind; a replica refuses it.
		_, err = command(ctx, next, "DEL", "redistest:failover-probe")
		return err
	})

	host, port, _ := net.SplitHostPort(next)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_, _ = command(ctx, old, "REPLICAOF", host, port) // best effort: it may be down
	cancel()
	st.master = next
}

// writeSentinelConf writes a sentinel's config file; the sentinel rewrites it
// as it learns, and keeps it across Restart.
func writeSentinelConf(tb testing.TB, s *Server, masterPort int) {
	tb.Helper()
	name := sentinelMasterName
	conf := strings.Join([]string{
		fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2", name, masterPort),
		fmt.Sprintf("sentinel down-after-milliseconds %s 1000", name),
		fmt.Sprintf("sentinel failover-timeout %s 10000", name),
		fmt.Sprintf("sentinel parallel-syncs %s 1", name),
		"",
	}, "\n")
	if err := os.WriteFile(s.sentinelConfPath(), []byte(conf), 0o600); err != nil {
		tb.Fatalf("redistest: writing sentinel config: %v", err)
	}
}

func (s *Server) sentinelConfPath() string { return filepath.Join(s.dir, "sentinel.conf") }

// masterBySentinel asks one sentinel for the master's address.
func masterBySentinel(ctx context.Context, sentinel string) (string, error) {
	v, err := command(ctx, sentinel, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", sentinelMasterName)
	if err != nil {
		return "", err
	}
	hp, _ := v.([]any)
	if len(hp) != 2 {
		return "", fmt.Errorf("GET-MASTER-ADDR-BY-NAME = %v", v)
	}
	return net.JoinHostPort(fmt.Sprint(hp[0]), fmt.Sprint(hp[1])), nil
}

// replicaInSync reports whether replica has an up link to master.
func replicaInSync(ctx context.Context, master, replica string) error {
	v, err := command(ctx, replica, "INFO", "replication")
	if err != nil {
		return err
	}
	info, _ := v.(string)
	if got := infoField(info, "master_port"); net.JoinHostPort("127.0.0.1", got) != master {
		return fmt.Errorf("%s: master_port=%q, want master %s", replica, got, master)
	}
	if got := infoField(info, "master_link_status"); got != "up" {
		return fmt.Errorf("%s: master_link_status=%q", replica, got)
	}
	return nil
}

// checkSentinels reports whether every sentinel knows master as the master,
// replica as a healthy replica, and the other sentinels.
func (st *Sentinel) checkSentinels(ctx context.Context, master, replica string) error {
	for _, s := range st.sentinels {
		addr, err := masterBySentinel(ctx, s.Addr())
		if err != nil {
			return fmt.Errorf("sentinel %s: %w", s.Addr(), err)
		}
		if addr != master {
			return fmt.Errorf("sentinel %s: master %s, want %s", s.Addr(), addr, master)
		}
		replicas, err := sentinelEntries(ctx, s.Addr(), "REPLICAS")
		if err != nil {
			return fmt.Errorf("sentinel %s: %w", s.Addr(), err)
		}
		healthy := false
		for _, r := range replicas {
			if net.JoinHostPort(r["ip"], r["port"]) == replica && r["flags"] == "slave" &&
				r["master-link-status"] == "ok" {
				healthy = true
			}
		}
		if !healthy {
			return fmt.Errorf("sentinel %s: replica %s not healthy: %v", s.Addr(), replica, replicas)
		}
		others, err := sentinelEntries(ctx, s.Addr(), "SENTINELS")
		if err != nil {
			return fmt.Errorf("sentinel %s: %w", s.Addr(), err)
		}
		if len(others) != sentinelCount-1 {
			return fmt.Errorf("sentinel %s knows %d other sentinels, want %d", s.Addr(), len(others), sentinelCount-1)
		}
	}
	return nil
}

// sentinelEntries runs SENTINEL REPLICAS|SENTINELS and returns the entries as
// field maps.
func sentinelEntries(ctx context.Context, sentinel, what string) ([]map[string]string, error) {
	v, err := command(ctx, sentinel, "SENTINEL", what, sentinelMasterName)
	if err != nil {
		return nil, err
	}
	list, _ := v.([]any)
	var out []map[string]string
	for _, e := range list {
		fields, _ := e.([]any)
		m := map[string]string{}
		for i := 0; i+1 < len(fields); i += 2 {
			m[fmt.Sprint(fields[i])] = fmt.Sprint(fields[i+1])
		}
		out = append(out, m)
	}
	return out, nil
}
