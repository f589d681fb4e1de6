package redisscript

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// SendTx sends the commands of the last Build to client as one Redis
// transaction (MULTI ... EXEC): Redis runs them one after another with no
// other client's command in between. Each command then carries its own
// reply or error, as after Send; a command that did not run (the
// transaction was refused, or not answered) carries the transaction's
// error.
//
// A script Redis does not have fails every script command of the
// transaction with NOSCRIPT (they all run on one node, whose script cache
// cannot change while the transaction runs) and lets the DELs run. So a
// transaction with a DEL has its first script command carry the script
// itself (EVAL), and one without DEL is sent again, with the script, when
// Redis answered NOSCRIPT: nothing of it had run. Either way the
// transaction runs as one, and the script crosses the network only when
// needed, or with a TB.RESET.
//
// On a Redis Cluster every key must be in one hash slot, and each command
// must carry one key (Build with KeysPerCall) so that go-redis sees them
// all: it refuses a transaction across slots without sending anything, and
// SendTx returns redis.ErrCrossSlot. Otherwise it returns what go-redis's
// Exec returns, the first command's error, and how many EVAL it sent.
// ctx bounds all of it.
func (b *Batch) SendTx(ctx context.Context, client redis.UniversalClient) (evals int, err error) {
	withDel := false
	for i := range b.calls {
		withDel = withDel || b.calls[i].op == Reset
	}
	if withDel && b.evalFirst(ctx) {
		evals++
	}
	err = execTx(ctx, client, b.cmds)
	if withDel || !b.allNoScript() {
		return evals, err
	}
	for k := range b.cmds {
		b.cmds[k] = again(ctx, b.cmds[k], k == 0)
	}
	return evals + 1, execTx(ctx, client, b.cmds)
}

// evalFirst makes the first script command an EVAL, reporting whether
// there is one.
func (b *Batch) evalFirst(ctx context.Context) bool {
	for k, cmd := range b.cmds {
		if w, ok := cmd.Args()[0].(*string); ok && w == &wordEvalSha {
			b.cmds[k] = again(ctx, cmd, true)
			return true
		}
	}
	return false
}

// allNoScript reports whether Redis answered NOSCRIPT to every command.
func (b *Batch) allNoScript() bool {
	for _, cmd := range b.cmds {
		if Classify(cmd.Err()) != NoScript {
			return false
		}
	}
	return len(b.cmds) > 0
}

// execTx sends cmds as one transaction. Commands left with neither a reply
// nor an error get the transaction's error.
func execTx(ctx context.Context, client redis.UniversalClient, cmds []*redis.Cmd) error {
	if len(cmds) == 0 {
		return nil
	}
	cmders := make([]redis.Cmder, len(cmds))
	for i, cmd := range cmds {
		cmders[i] = noRetry{cmd}
	}
	tx := client.TxPipeline()
	_ = tx.BatchProcess(ctx, cmders...) // only queues; never fails
	_, err := tx.Exec(ctx)
	if err != nil {
		for _, cmd := range cmds {
			if cmd.Err() == nil && cmd.Val() == nil {
				cmd.SetErr(err)
			}
		}
	}
	return err
}
