package faults

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// StartContenders starts n clients beside the workload's that try, every
// pause, to take one of the workload's keys without waiting (wait 0), and
// when granted write once and release at once: a key that looks free for a
// moment, as after Redis lost data, is taken then, where the workload's
// waiters might wake too late to. Run.Stop stops them too. Call it after
// Start.
func (r *Run) StartContenders(n int, pause time.Duration) {
	for i := range n {
		c := r.NewClient(10000+i, i, fmt.Sprintf("contender-%d", i), r.replicas)
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(c.ID), 11))
			for !r.stopping.Load() {
				key := r.w.Keys[rnd.IntN(len(r.w.Keys))]
				h, err := c.Acquire(r.ctx, key, AcquireOptions{TTL: r.w.TTL})
				if err == nil && h != nil {
					h.Write(r.ctx, time.Millisecond, nil)
					_, _ = h.Release(r.ctx, true)
				}
				time.Sleep(pause)
			}
		}()
	}
}
