package redislock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// IdentityCheck checks each new connection to Redis before it serves
// anything: a server that restarted since the engine last saw it (a
// restart from an older RDB snapshot or AOF keeps lockd's markers but not
// the leases granted since), or a master that took over slots from one
// that is gone (a failover to a replica that had not caught up), may have
// lost lockd's writes. New grants on its slots are then held back, through
// that very connection, before it is handed out, and every KeepAlive
// renews at once: no grant is served over a connection to a Redis whose
// identity lockd has not checked since it last saw that server's data,
// and holders whose leases vanished learn first. The poll of
// Options.WatchInterval only adds to it.
//
// Set its OnConnect as the OnConnect of the go-redis client's options
// (redis.Options, redis.FailoverOptions or redis.ClusterOptions), and the
// IdentityCheck as Options.IdentityCheck of the engine using that client.
// It does nothing without Options.DataLossGrace, or before the engine is
// made (the first connections only introduce the server).
type IdentityCheck struct {
	w atomic.Pointer[lossWatch]
}

// OnConnect checks the server a new connection reaches; see IdentityCheck.
// An error (the pause could not be written) fails the connection, and the
// next one checks again.
func (ic *IdentityCheck) OnConnect(ctx context.Context, cn *redis.Conn) error {
	if ic == nil {
		return nil
	}
	w := ic.w.Load()
	if w == nil {
		return nil
	}
	return w.identity.check(ctx, w, cn)
}

// identityHoldTimeout bounds writing the holds of a server found changed:
// once started, it is not cut short by the deadline of the call that
// happened to dial.
const identityHoldTimeout = 10 * time.Second

// identity is what the engine last saw of each server: on a single Redis
// (or a Sentinel's master), its run_id; on Cluster, the run_id of each node
// and the node serving each slot.
type identity struct {
	mu     sync.Mutex
	runID  string            // single Redis or Sentinel master
	nodes  map[string]string // Cluster: node id -> run_id
	owners []string          // Cluster: slot -> node id
}

func (id *identity) check(ctx context.Context, w *lossWatch, cn *redis.Conn) error {
	info, err := cn.Info(ctx, "server").Result()
	if err != nil {
		var re redis.Error
		if errors.As(err, &re) {
			w.infoRefused(err) // cannot tell; the markers still protect
			return nil
		}
		return err
	}
	runID := infoField(info, "run_id")
	if runID == "" {
		return nil
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if w.c.cluster == nil {
		if id.runID == "" || id.runID == runID {
			id.runID = runID
			return nil
		}
		if err := w.pauseThrough(ctx, cn, w.c.allMarkers(), "restarted or failed over"); err != nil {
			return err
		}
		id.runID = runID
		return nil
	}
	return id.checkNode(ctx, w, cn, runID)
}

// checkNode is check on Cluster: the slots a restarted node serves, and
// those a node took over from a master that no longer serves any slot,
// are held back.
func (id *identity) checkNode(ctx context.Context, w *lossWatch, cn *redis.Conn, runID string) error {
	self, err := cn.Do(ctx, "cluster", "myid").Text()
	if err != nil {
		return nil // not answering as a Cluster node: nothing to compare
	}
	ranges, err := cn.ClusterSlots(ctx).Result()
	if err != nil {
		return err
	}
	masters := map[string]bool{}
	var mine []int
	for _, r := range ranges {
		if len(r.Nodes) == 0 {
			continue
		}
		masters[r.Nodes[0].ID] = true
		if r.Nodes[0].ID != self {
			continue
		}
		for slot := r.Start; slot <= r.End && slot < slotCount; slot++ {
			mine = append(mine, slot)
		}
	}
	if id.nodes == nil {
		id.nodes = map[string]string{}
		id.owners = make([]string, slotCount)
	}
	prev := id.nodes[self]
	restarted := prev != "" && prev != runID
	var held []string
	for _, slot := range mine {
		before := id.owners[slot]
		// A slot moved from a master that still serves others was
		// resharded, its keys migrated with it; one moved from a master
		// that serves none any more failed over.
		tookOver := before != "" && before != self && !masters[before]
		if restarted || tookOver {
			held = append(held, w.c.markerForSlot(slot))
		}
	}
	if len(held) > 0 {
		if err := w.pauseThrough(ctx, cn, held, "node restarted or took over slots"); err != nil {
			return err
		}
	}
	id.nodes[self] = runID
	for _, slot := range mine {
		id.owners[slot] = self
	}
	return nil
}

// pauseThrough holds new grants back on the slots of markers through cn,
// and has every KeepAlive renew at once.
func (w *lossWatch) pauseThrough(ctx context.Context, cn *redis.Conn, markers []string, why string) error {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), identityHoldTimeout)
	defer cancel()
	failed, err := pauseMarkers(hctx, cn, markers, w.c.lossGrace)
	if len(failed) > 0 {
		return fmt.Errorf("redislock: Redis %s; holding grants back failed: %w", why, err)
	}
	w.event("Redis "+why+" since lockd last saw it and may have lost lockd's data: new grants are held back and kept-alive leases checked at once",
		"slots", len(markers), "pause", w.c.lossGrace)
	return nil
}
