package redislock

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// run runs script for the lock ks and returns its reply, a list. With
// Options.WaitReplicas, a WAIT follows the script in one pipeline on the
// connection of the record's node, and too few confirmations give the reply
// together with an error wrapping ErrNotReplicated (the script's effects
// stand: the caller decides what to undo).
func (c *Client) run(ctx context.Context, script *script, ks keySet, keys []string, args ...any) ([]any, error) {
	reply, err := c.runRaw(ctx, script, ks, keys, args...)
	list, ok := reply.([]any)
	if reply != nil && !ok {
		return nil, fmt.Errorf("redislock: unexpected script reply %v", reply)
	}
	return list, err
}

// runRaw is run for a script whose reply may be other than a list.
func (c *Client) runRaw(ctx context.Context, script *script, ks keySet, keys []string, args ...any) (any, error) {
	if c.waitReplicas <= 0 {
		return script.Run(ctx, c.scripts, keys, args...).Result()
	}
	pipe, err := c.nodePipeline(ctx, ks)
	if err != nil {
		return nil, err
	}
	cmd := script.EvalSha(ctx, pipe, keys, args...)
	wait := c.wait(ctx, pipe)
	_, _ = pipe.Exec(ctx)
	if isNoScript(cmd.Err()) {
		cmd = script.Eval(ctx, pipe, keys, args...)
		wait = c.wait(ctx, pipe)
		_, _ = pipe.Exec(ctx)
	}
	reply, err := cmd.Result()
	if err != nil {
		return nil, err
	}
	return reply, c.confirmed(wait)
}

// pipelineRenewals sends the renewals of one node (addr; "" on a single
// Redis) in one pipeline, resending with the script's text those that met a
// Redis without it cached (restarted, or a replica promoted on failover).
// The error reports a WAIT that too few replicas confirmed.
func (c *Client) pipelineRenewals(ctx context.Context, addr string, group []*renewal) ([]*redis.Cmd, error) {
	var pipe redis.Pipeliner
	if c.waitReplicas > 0 {
		var err error
		if pipe, err = c.nodePipeline(ctx, group[0].ks); err != nil {
			cmds := make([]*redis.Cmd, len(group))
			for i := range cmds {
				cmds[i] = redis.NewCmd(ctx)
				cmds[i].SetErr(err)
			}
			return cmds, err
		}
	} else {
		pipe = c.rdb.Pipeline()
	}
	cmds := make([]*redis.Cmd, len(group))
	for i, rn := range group {
		cmds[i] = renewScript.EvalSha(ctx, pipe, rn.ks.scriptKeys(true), rn.renewArgs(c)...)
	}
	var wait *redis.Cmd
	if c.waitReplicas > 0 {
		wait = c.wait(ctx, pipe)
	}
	_, _ = pipe.Exec(ctx)
	resend := false
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			cmds[i] = renewScript.Eval(ctx, pipe, group[i].ks.scriptKeys(true), group[i].renewArgs(c)...)
			resend = true
		}
	}
	if resend {
		if c.waitReplicas > 0 {
			wait = c.wait(ctx, pipe)
		}
		_, _ = pipe.Exec(ctx)
	}
	if wait == nil {
		return cmds, nil
	}
	return cmds, c.confirmed(wait)
}

func (rn *renewal) renewArgs(c *Client) []any {
	return append(rn.args(), c.lossGrace.Milliseconds())
}

// nodePipeline returns a pipeline on one connection to the master holding
// ks, so that a WAIT in it covers the scripts before it.
func (c *Client) nodePipeline(ctx context.Context, ks keySet) (redis.Pipeliner, error) {
	if c.cluster == nil {
		return c.rdb.Pipeline(), nil
	}
	node, err := c.cluster.MasterForKey(ctx, ks.record)
	if err != nil {
		return nil, err
	}
	return node.Pipeline(), nil
}

// wait queues a WAIT for Options.WaitReplicas in pipe.
func (c *Client) wait(ctx context.Context, pipe redis.Pipeliner) *redis.Cmd {
	return pipe.Do(ctx, "wait", c.waitReplicas, c.waitTimeout.Milliseconds())
}

// confirmed checks a WAIT's answer against Options.WaitReplicas.
func (c *Client) confirmed(wait *redis.Cmd) error {
	n, err := wait.Int64()
	if err != nil {
		return err
	}
	if n < int64(c.waitReplicas) {
		return fmt.Errorf("%w: %d of %d replicas within %v", ErrNotReplicated, n, c.waitReplicas, c.waitTimeout)
	}
	return nil
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
