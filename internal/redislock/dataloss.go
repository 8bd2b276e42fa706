package redislock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Data loss. When Redis comes back without lockd's data (a restart without
// persistence, a failover to a replica that had not caught up), holders may
// still believe in leases Redis no longer knows, so:
//
//   - Each hash slot has a marker key (keys.go) created when the engine
//     starts. A lock script that finds its marker gone knows the data went
//     with it: it makes the marker again holding new grants back for
//     DataLossGrace, in the script itself, so every replica of the fleet
//     obeys it from that instant.
//   - A watch asks every master for its run_id every WatchInterval. A
//     master that restarted, or a new master taking over slots (failover),
//     may have lost writes while its markers survived: the watch holds
//     grants back on its slots the same way.
//   - Whenever this engine learns of a pause it had not seen (from the
//     watch, or from any script's reply), every KeepAlive renews at once,
//     so those whose leases vanished end with ErrNotHeld before anyone can
//     be granted their keys.
//
// Fencing tokens keep rising throughout: they come from Redis's clock.

// lossWatch is the data-loss machinery of one Client.
type lossWatch struct {
	c *Client

	ready     atomic.Bool
	prepareMu sync.Mutex

	mu        sync.Mutex
	seen      map[string]int64 // marker -> end of the last pause seen
	lastEvent time.Time

	stop chan struct{}
	done chan struct{}
	// Watch state: run_id per master address, and on Cluster the master
	// address of every slot, as of the last poll.
	runIDs    map[string]string
	owners    []string
	infoError atomic.Bool
	// pending are the markers whose pause could not be written yet (the
	// master not back in service): retried at every poll.
	pending []string
	// identity is what IdentityCheck compares new connections with.
	identity identity
}

func newLossWatch(c *Client) *lossWatch {
	w := &lossWatch{c: c, seen: map[string]int64{}, stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *lossWatch) close() {
	close(w.stop)
	<-w.done
}

// Prepare creates the data-loss markers that are missing, once per Client;
// calls do it on their own when needed, so calling it is optional (lockd
// does at start-up). Markers must exist before any lock script runs: a lock
// script that finds its marker missing holds grants back.
func (c *Client) Prepare(ctx context.Context) error {
	return c.prepared(ctx)
}

func (c *Client) prepared(ctx context.Context) error {
	if c.loss == nil || c.loss.ready.Load() {
		return nil
	}
	return c.loss.prepare(ctx)
}

// prepare creates the missing markers without a pause. A Redis that lost
// lockd's data before this process ever saw it cannot be told from a fresh
// one; replicas that were running hold grants back by themselves. Redis's
// uptime says which it may be, for the log.
func (w *lossWatch) prepare(ctx context.Context) error {
	w.prepareMu.Lock()
	defer w.prepareMu.Unlock()
	if w.ready.Load() {
		return nil
	}
	c := w.c
	markers := c.allMarkers()
	created := 0
	const chunk = 2048
	for i := 0; i < len(markers); i += chunk {
		pipe := c.rdb.Pipeline()
		var cmds []*redis.BoolCmd
		for _, m := range markers[i:min(i+chunk, len(markers))] {
			cmds = append(cmds, pipe.SetNX(ctx, m, "0", 0))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		for _, cmd := range cmds {
			if cmd.Val() {
				created++
			}
		}
	}
	w.ready.Store(true)
	if created > 0 {
		uptime := w.uptime(ctx)
		if uptime >= 0 && uptime < c.lossGrace {
			c.log.Warn("lockd's data-loss markers were missing on a Redis that started recently: if it lost lockd's data, "+
				"leases granted before may still be believed held; lockd replicas that were running hold grants back by themselves",
				"created", created, "redis_uptime", uptime)
		} else {
			c.log.Info("created lockd's data-loss markers", "created", created)
		}
	}
	return nil
}

// allMarkers names the data-loss markers of every hash slot.
func (c *Client) allMarkers() []string {
	markers := make([]string, slotCount)
	for slot := range slotCount {
		markers[slot] = c.markerForSlot(slot)
	}
	return markers
}

// uptime is the shortest uptime of the masters, or -1 if unknown.
func (w *lossWatch) uptime(ctx context.Context) time.Duration {
	shortest := time.Duration(-1)
	var mu sync.Mutex
	read := func(ctx context.Context, rdb *redis.Client) error {
		info, err := rdb.Info(ctx, "server").Result()
		if err != nil {
			return err
		}
		s, err := strconv.Atoi(infoField(info, "uptime_in_seconds"))
		if err != nil {
			return err
		}
		mu.Lock()
		if d := time.Duration(s) * time.Second; shortest < 0 || d < shortest {
			shortest = d
		}
		mu.Unlock()
		return nil
	}
	if w.c.cluster != nil {
		_ = w.c.cluster.ForEachMaster(ctx, read)
	} else if rdb, ok := w.c.rdb.(*redis.Client); ok {
		_ = read(ctx, rdb)
	}
	return shortest
}

// notePause looks at the pause of grants a script reported for ks's slot:
// one this engine had not seen makes every KeepAlive renew at once.
func (c *Client) notePause(ks keySet, reply []any) {
	if c.loss == nil || len(reply) < 3 {
		return
	}
	paused, now := intAt(reply, 2), intAt(reply, 1)
	if paused <= now {
		return // the common case: no grants held back
	}
	w := c.loss
	w.mu.Lock()
	fresh := paused > w.seen[ks.marker]
	if fresh {
		w.seen[ks.marker] = paused
	}
	w.mu.Unlock()
	if fresh {
		w.event("Redis lost lockd's data: new grants are held back and kept-alive leases checked at once",
			"pause", time.Duration(paused-now)*time.Millisecond)
	}
}

// event logs a data-loss event (at most once a second), tells a
// DataLossObserver and has every KeepAlive renew at once.
func (w *lossWatch) event(msg string, args ...any) {
	if o, ok := w.c.obs.(DataLossObserver); ok {
		o.DataLoss()
	}
	w.mu.Lock()
	quiet := time.Since(w.lastEvent) < time.Second
	if !quiet {
		w.lastEvent = time.Now()
	}
	w.mu.Unlock()
	if !quiet {
		w.c.log.Warn(msg, args...)
	}
	w.c.renewer.rush()
}

func (w *lossWatch) run() {
	defer close(w.done)
	tick := time.NewTicker(w.c.watchInterval)
	defer tick.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), max(w.c.watchInterval, time.Second))
		w.poll(ctx)
		cancel()
	}
}

// poll compares each master's run_id (and on Cluster, which master serves
// each slot) with the last poll, and holds grants back on the slots of a
// master that restarted or took over from another.
func (w *lossWatch) poll(ctx context.Context) {
	if len(w.pending) > 0 {
		// Holds written late make every KeepAlive check again.
		if failed, _ := w.pauseSlots(ctx, w.pending); len(failed) < len(w.pending) {
			w.pending = failed
			w.c.renewer.rush()
		}
	}
	runIDs := map[string]string{}
	var mu sync.Mutex
	read := func(ctx context.Context, rdb *redis.Client) error {
		info, err := rdb.Info(ctx, "server").Result()
		if err != nil {
			w.infoRefused(err)
			return err
		}
		if id := infoField(info, "run_id"); id != "" {
			mu.Lock()
			runIDs[rdb.Options().Addr] = id
			mu.Unlock()
		}
		return nil
	}
	if w.c.cluster == nil {
		rdb, ok := w.c.rdb.(*redis.Client)
		if !ok {
			return
		}
		_ = read(ctx, rdb)
		id, prev := runIDs[rdb.Options().Addr], w.runIDs[rdb.Options().Addr]
		if id == "" {
			return // unreachable now: judged when it answers
		}
		if prev != "" && prev != id {
			w.lost(ctx, w.c.allMarkers())
		}
		w.runIDs = runIDs
		return
	}

	slots, err := w.c.cluster.ClusterSlots(ctx).Result()
	if err != nil {
		return
	}
	owners := make([]string, slotCount)
	for _, s := range slots {
		if len(s.Nodes) == 0 {
			continue
		}
		for slot := s.Start; slot <= s.End && slot < slotCount; slot++ {
			owners[slot] = s.Nodes[0].Addr
		}
	}
	_ = w.c.cluster.ForEachMaster(ctx, read)
	// A master that did not answer keeps the run_id last seen.
	for addr, id := range w.runIDs {
		if _, ok := runIDs[addr]; !ok {
			runIDs[addr] = id
		}
	}
	if w.owners != nil {
		var lost []string
		for slot, addr := range owners {
			prevAddr := w.owners[slot]
			if addr == "" || prevAddr == "" {
				continue
			}
			restarted := addr == prevAddr && w.runIDs[addr] != "" && runIDs[addr] != w.runIDs[addr]
			// A slot that moved between two masters that both still run
			// as before was resharded, its keys migrated; one that moved
			// from a master that is gone or restarted failed over.
			_, stillMaster := runIDs[prevAddr]
			tookOver := addr != prevAddr && (!stillMaster || runIDs[prevAddr] != w.runIDs[prevAddr])
			if restarted || tookOver {
				lost = append(lost, w.c.markerForSlot(slot))
			}
		}
		if len(lost) > 0 {
			w.lost(ctx, lost)
		}
	}
	w.runIDs, w.owners = runIDs, owners
}

// pauseSlots holds new grants back on the slots of markers and returns the
// markers whose pause could not be written (the master not back in service
// yet), with the first error.
func (w *lossWatch) pauseSlots(ctx context.Context, markers []string) ([]string, error) {
	return pauseMarkers(ctx, w.c.rdb, markers, w.c.lossGrace)
}

// pauseChunk is how many markers one pipeline holds.
const pauseChunk = 2048

// pipeliner makes pipelines: a client, or one connection.
type pipeliner interface {
	Pipeline() redis.Pipeliner
}

// pauseMarkers runs pause.lua for every marker, in pipelines, and returns the
// markers it could not pause with the first error. Markers that met a Redis
// without the script cached (it just restarted) are sent again once one of
// them has loaded it, with the text only where still needed.
func pauseMarkers(ctx context.Context, rdb pipeliner, markers []string, grace time.Duration) ([]string, error) {
	var failed []string
	var first error
	for i := 0; i < len(markers); i += pauseChunk {
		chunk := markers[i:min(i+pauseChunk, len(markers))]
		cmds := make([]*redis.Cmd, len(chunk))
		send := func(idx []int, loaded bool) {
			pipe := rdb.Pipeline()
			for _, j := range idx {
				if loaded {
					cmds[j] = pauseScript.EvalSha(ctx, pipe, []string{chunk[j]}, grace.Milliseconds())
				} else {
					cmds[j] = pauseScript.Eval(ctx, pipe, []string{chunk[j]}, grace.Milliseconds())
				}
			}
			_, _ = pipe.Exec(ctx)
		}
		all := make([]int, len(chunk))
		for j := range all {
			all[j] = j
		}
		send(all, true)
		for pass := 0; pass < 2; pass++ {
			var again []int
			for j, cmd := range cmds {
				if isNoScript(cmd.Err()) {
					again = append(again, j)
				}
			}
			if len(again) == 0 {
				break
			}
			// The first pass loads the script with one EVAL and tries the
			// rest by hash again; the second sends the text to whoever
			// still lacks it (other nodes of a Cluster).
			if pass == 0 {
				send(again[:1], false)
				send(again[1:], true)
			} else {
				send(again, false)
			}
		}
		for j, cmd := range cmds {
			if err := cmd.Err(); err != nil {
				failed = append(failed, chunk[j])
				if first == nil {
					first = err
				}
			}
		}
	}
	return failed, first
}

// lost holds grants back on the slots of markers, to be retried at every
// poll until written, and has every KeepAlive renew at once.
func (w *lossWatch) lost(ctx context.Context, markers []string) {
	failed, err := w.pauseSlots(ctx, markers)
	w.pending = append(w.pending, failed...)
	w.event("Redis restarted or failed over and may have lost lockd's data: new grants are held back and kept-alive leases checked at once",
		"slots", len(markers), "pause", w.c.lossGrace, "err", err)
}

// infoRefused logs once that INFO is not allowed, so restarts that keep the
// markers (and failovers) cannot be seen; the markers still are.
func (w *lossWatch) infoRefused(err error) {
	var re redis.Error
	if !errors.As(err, &re) || w.infoError.Swap(true) {
		return
	}
	w.c.log.Warn("cannot ask Redis for its run_id (INFO refused): Redis restarts that keep some data and failovers are not noticed, "+
		"only the loss of lockd's markers", "err", err)
}

// infoField reads one field of an INFO reply.
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}
