package redisstore

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/redisscript"
	"github.com/bucketd/bucketd/internal/redistest"
)

// benchKeys is how many keys the benchmarks spread over.
const benchKeys = 10000

var benchLimit = bucket.Limit{Capacity: 1e9, Rate: 1e6} // always allowed

func benchKeyNames() [][]byte {
	keys := make([][]byte, benchKeys)
	for i := range keys {
		keys[i] = []byte("bench:" + strconv.Itoa(i))
	}
	return keys
}

// BenchmarkStoreAcquireParallel: TB.ACQUIRE through the store, one Caller
// per goroutine (as one per connection), each Run one acquire, against a
// real redis-server. Allocations are per operation, all included (go-redis
// commands and replies, the pipeline's share). The timeout is long so that
// a loaded machine measures throughput, not the policy.
func BenchmarkStoreAcquireParallel(b *testing.B) {
	srv := redistest.Start(b)
	s := startStore(b, srv.Client(storeOptions()), Config{Prefix: "tb:", Timeout: exactTimeout})
	loadScript(b, s)
	keys := benchKeyNames()
	b.ReportAllocs()
	b.SetParallelism(16) // many connections, as a server has
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c := s.NewCaller().(*Caller)
		rng := rand.New(rand.NewPCG(rand.Uint64(), 0))
		for pb.Next() {
			c.Add(decide.Request{Kind: decide.Acquire, Key: keys[rng.IntN(len(keys))], Limit: benchLimit, Cost: 1})
			rs, err := c.Run()
			if err != nil || !rs[0].Decision.Allowed {
				b.Fatalf("acquire: %+v, %v (errors %d, degraded %d)", rs, err, s.Errors(), s.Degraded())
			}
		}
	})
	b.StopTimer()
	if s.Errors() != 0 {
		b.Fatalf("%d errors", s.Errors())
	}
}

// BenchmarkClusterStoreAcquireParallel is BenchmarkStoreAcquireParallel
// against a three-master Redis Cluster: each operation its own EVALSHA, each
// master's share of a pipeline sent by that master's own lane.
func BenchmarkClusterStoreAcquireParallel(b *testing.B) {
	cl := redistest.StartCluster(b, 3)
	s := startStore(b, cl.Client(clusterOptions()), Config{Prefix: "tb:", Timeout: exactTimeout})
	loadScript(b, s)
	keys := benchKeyNames()
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c := s.NewCaller().(*Caller)
		rng := rand.New(rand.NewPCG(rand.Uint64(), 0))
		for pb.Next() {
			c.Add(decide.Request{Kind: decide.Acquire, Key: keys[rng.IntN(len(keys))], Limit: benchLimit, Cost: 1})
			rs, err := c.Run()
			if err != nil || !rs[0].Decision.Allowed {
				b.Fatalf("acquire: %+v, %v (errors %d, degraded %d)", rs, err, s.Errors(), s.Degraded())
			}
		}
	})
	b.StopTimer()
	if s.Errors() != 0 {
		b.Fatalf("%d errors", s.Errors())
	}
}

// BenchmarkDirectEVALSHAParallel is the baseline: the same calls made with
// EVALSHA by go-redis directly, one command per round trip per goroutine,
// as clients that call the script themselves do.
func BenchmarkDirectEVALSHAParallel(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(storeOptions())
	if err := rdb.ScriptLoad(context.Background(), bucket.Script).Err(); err != nil {
		b.Fatal(err)
	}
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = "tb:bench:" + strconv.Itoa(i)
	}
	args := []any{"1e+09", "1e+06", "1", "acquire", "", ""} // benchLimit, cost 1, Redis TIME
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(rand.Uint64(), 0))
		for pb.Next() {
			v, err := rdb.EvalSha(ctx, bucket.ScriptSHA1, []string{keys[rng.IntN(len(keys))]}, args...).Result()
			if err != nil {
				b.Fatal(err)
			}
			if d, err := redisscript.ParseDecision(v); err != nil || !d.Allowed {
				b.Fatalf("reply %v: %v", v, err)
			}
		}
	})
}
