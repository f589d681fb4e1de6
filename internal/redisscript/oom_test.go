package redisscript

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/redistest"
)

// TestOOMRefusesPutsNotDeletions pins down what replication relies on at
// Redis's maxmemory (noeviction): a script call that puts is refused as
// OOM, as are all the calls that share its command, while a command of
// deletions only runs (the script's first write is a DEL, which Redis
// never refuses for memory) and frees the memory.
func TestOOMRefusesPutsNotDeletions(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t, "--maxmemory", "2mb", "--maxmemory-policy", "noeviction").
		Client(&redis.Options{MaxRetries: -1, ContextTimeoutEnabled: true})
	l := bucket.Limit{Capacity: 10, Rate: 0.001}
	var b Batch
	send := func(op Op, keys ...string) []error {
		t.Helper()
		b.Reset("tb:")
		for _, k := range keys {
			b.AddString(k, Call{Op: op, Limit: l, At: 1, State: bucket.State{Tokens: 3, Last: 1}})
		}
		b.Build(ctx, BatchKeys)
		b.Send(ctx, rdb)
		errs := make([]error, len(keys))
		for i := range keys {
			_, errs[i] = b.Reply(i)
		}
		return errs
	}
	if errs := send(Put, "old"); errs[0] != nil {
		t.Fatal(errs[0])
	}
	// One script fills Redis past maxmemory: only a script's first write
	// is checked against it.
	if err := rdb.Eval(ctx, "for i = 1, 20000 do redis.call('SET', 'fill:' .. i, string.rep('x', 64)) end", nil).Err(); err != redis.Nil {
		t.Fatal(err)
	}
	keys := make([]string, 3)
	for i := range keys {
		keys[i] = fmt.Sprint("new", i)
	}
	for i, err := range send(Put, keys...) {
		if Classify(err) != OOM {
			t.Errorf("put %s at maxmemory: %v (class %d), want OOM", keys[i], err, Classify(err))
		}
	}
	for i, err := range send(Del, "old", "gone") {
		if err != nil {
			t.Errorf("deletion %d at maxmemory: %v", i, err)
		}
	}
	if n := rdb.Exists(ctx, "tb:old").Val(); n != 0 {
		t.Fatal("tb:old not deleted")
	}
}
