package redisscript

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// noRetry marks a command as one go-redis must not send again after a
// transport error or a retryable error reply: Redis may have run it, and
// the caller decides what to do (replication writes again, store mode
// answers with its policy). Redirections (MOVED, ASK), after which Redis
// has not run it, still work.
type noRetry struct{ *redis.Cmd }

func (noRetry) NoRetry() bool { return true }

// reloadRounds is how many times commands answered NOSCRIPT are sent again.
const reloadRounds = 2

// Send sends the commands of the last Build to client in one pipeline.
// Commands Redis answered NOSCRIPT ran nothing, so sending them again is
// safe: the first round sends the script itself (EVAL) once per Redis node,
// with EVALSHA behind it on the same connection, and the second sends EVAL
// for whatever still failed. It returns how many EVAL it sent. Each call's
// outcome is then in Reply; ctx bounds all of it.
func (b *Batch) Send(ctx context.Context, client redis.UniversalClient) (evals int) {
	exec(ctx, client, b.cmds)
	var retry []int
	for k, cmd := range b.cmds {
		if Classify(cmd.Err()) == NoScript {
			retry = append(retry, k)
		}
	}
	for round := 0; len(retry) > 0 && round < reloadRounds; round++ {
		evals += b.reload(ctx, client, retry, round)
		again := retry[:0]
		for _, k := range retry {
			if Classify(b.cmds[k].Err()) == NoScript {
				again = append(again, k)
			}
		}
		retry = again
	}
	return evals
}

// SendNode sends the commands of the last Build to node, one master of
// cluster (go-redis's own client for it, cluster.MasterForKey), in one
// pipeline on that master's connection, handling NOSCRIPT as Send does.
// Nothing of another master is in the pipeline, so another master that is
// down or slow cannot delay or fail these commands, and a reply this master
// sent is never replaced by an error. Commands the master answered MOVED
// or ASK (it ran nothing of them: the slot is served elsewhere now, or is
// moving) are then sent again one at a time through cluster, which follows
// the redirection and learns the new slot map. It returns how many EVAL it
// sent. ctx bounds all of it.
func (b *Batch) SendNode(ctx context.Context, node *redis.Client, cluster *redis.ClusterClient) (evals int) {
	evals = b.Send(ctx, node)
	for k, cmd := range b.cmds {
		if Classify(cmd.Err()) != Redirect {
			continue
		}
		b.cmds[k] = clone(ctx, cmd, false)
		_ = cluster.Process(ctx, noRetry{b.cmds[k]}) // the outcome is in the command
		if Classify(b.cmds[k].Err()) == NoScript {
			b.cmds[k] = clone(ctx, b.cmds[k], true)
			_ = cluster.Process(ctx, noRetry{b.cmds[k]})
			evals++
		}
	}
	return evals
}

// exec sends cmds in one pipeline. Each command carries its own result.
func exec(ctx context.Context, client redis.UniversalClient, cmds []*redis.Cmd) {
	if len(cmds) == 0 {
		return
	}
	cmders := make([]redis.Cmder, len(cmds))
	for i, cmd := range cmds {
		cmders[i] = noRetry{cmd}
	}
	pl := client.Pipeline()
	_ = pl.BatchProcess(ctx, cmders...) // only queues; never fails
	// Exec's error is the first command's; each command carries its own.
	_, _ = pl.Exec(ctx)
}

// reload replaces the commands idx by new ones, as EVAL where the script
// must be loaded, sends them, and returns how many were EVAL.
func (b *Batch) reload(ctx context.Context, client redis.UniversalClient, idx []int, round int) (evals int) {
	cluster, _ := client.(*redis.ClusterClient)
	evalSent := false                // standalone
	var nodes map[*redis.Client]bool // cluster: masters with an EVAL in this round
	cmds := make([]*redis.Cmd, len(idx))
	for j, k := range idx {
		eval := round > 0
		switch {
		case eval:
		case cluster == nil:
			eval = !evalSent
			evalSent = true
		default:
			node, err := cluster.MasterForKey(ctx, keyOf(b.cmds[k]))
			if err != nil || !nodes[node] {
				eval = true
				if nodes == nil {
					nodes = make(map[*redis.Client]bool)
				}
				nodes[node] = true
			}
		}
		if eval {
			evals++
		}
		b.cmds[k] = again(ctx, b.cmds[k], eval)
		cmds[j] = b.cmds[k]
	}
	exec(ctx, client, cmds)
	return evals
}

// again returns a new command with the arguments of cmd, an EVALSHA: the
// same EVALSHA, or with eval the EVAL that carries the script itself.
func again(ctx context.Context, cmd *redis.Cmd, eval bool) *redis.Cmd {
	args := cmd.Args()
	if eval {
		args = append([]any{&wordEval, &scriptSrc}, args[2:]...)
	}
	return newCmd(ctx, args, 3)
}

// clone returns a new command with the arguments of cmd, a DEL or a
// script command (as again, with eval for an EVALSHA).
func clone(ctx context.Context, cmd *redis.Cmd, eval bool) *redis.Cmd {
	args := cmd.Args()
	if w, ok := args[0].(*string); ok && w == &wordDel {
		return newCmd(ctx, args, 1)
	}
	return again(ctx, cmd, eval)
}

// keyOf returns the first key of a script command (EVALSHA sha numkeys key …).
func keyOf(cmd *redis.Cmd) string {
	if s, ok := cmd.Args()[3].(*string); ok {
		return *s
	}
	return ""
}
