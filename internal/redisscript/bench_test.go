package redisscript

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/redistest"
)

// benchBatch is how many calls share one script command in these
// benchmarks: about what a lease instance's renewer sends per EVALSHA on
// the hot keys of scripts/bench-leases.sh (669 commands for 9,440 lease
// calls).
const benchBatch = 16

// benchKeyCount is how many keys the batches rotate over.
const benchKeyCount = 1000

// redisScriptMicros reads Redis's own time in the script so far (INFO
// commandstats, cmdstat_evalsha usec: the script and the commands it
// calls) and its CPU time (INFO cpu, user + sys), both in µs.
func redisScriptMicros(tb testing.TB, rdb *redis.Client) (script, cpu float64) {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "commandstats", "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:"); ok {
			for _, kv := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(kv, "usec="); ok {
					script, _ = strconv.ParseFloat(v, 64)
				}
			}
		}
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, f); ok {
				s, _ := strconv.ParseFloat(v, 64)
				cpu += s * 1e6
			}
		}
	}
	return script, cpu
}

// benchRedisCalls runs b.N calls on a real Redis, benchBatch per script
// command, each made by next(i, key) and its reply checked by check, and
// reports Redis's own time per call: redis-script-µs/op (the script,
// from INFO commandstats) and redis-cpu-µs/op (all its CPU, networking
// included, from INFO cpu). ns/op is the client's round trips and says
// little; the Redis figures are what lease mode's target is held to.
func benchRedisCalls(b *testing.B, next func(i int, key string) Call, check func(i int, v any)) {
	ctx := context.Background()
	rdb := redistest.Start(b).Client(&redis.Options{MaxRetries: -1})
	if err := Load(ctx, rdb); err != nil {
		b.Fatal(err)
	}
	keys := make([]string, benchKeyCount)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	var batch Batch
	run := func(from, n int) {
		batch.Reset("bench:")
		for j := range n {
			i := from + j
			batch.AddString(keys[i%len(keys)], next(i, keys[i%len(keys)]))
		}
		batch.Build(ctx, BatchKeys)
		batch.Send(ctx, rdb)
		for j := range n {
			v, err := batch.Reply(j)
			if err != nil {
				b.Fatalf("call %d: %v", from+j, err)
			}
			check(from+j, v)
		}
	}
	// Warm up: every key gets its state (and in lease mode its records).
	const warm = 4 * benchKeyCount
	for i := 0; i < warm; i += benchBatch {
		run(i, benchBatch)
	}
	script0, cpu0 := redisScriptMicros(b, rdb)
	b.ResetTimer()
	for i := 0; i < b.N; i += benchBatch {
		run(warm+i, min(benchBatch, b.N-i))
	}
	b.StopTimer()
	script1, cpu1 := redisScriptMicros(b, rdb)
	b.ReportMetric((script1-script0)/float64(b.N), "redis-script-µs/op")
	b.ReportMetric((cpu1-cpu0)/float64(b.N), "redis-cpu-µs/op")
}

var benchRedisLimit = bucket.Limit{Capacity: 100000, Rate: 100000}

// BenchmarkRedisAcquire: plain store mode's call, an acquire of 1 on a key
// with a state and no records.
func BenchmarkRedisAcquire(b *testing.B) {
	t0 := time.Now().UnixMicro()
	benchRedisCalls(b, func(i int, _ string) Call {
		return Call{Op: Acquire, Limit: benchRedisLimit, Cost: 1, At: t0 + int64(i)}
	}, func(i int, v any) {
		if d, err := ParseDecision(v); err != nil || !d.Allowed {
			b.Fatalf("acquire %d: %+v, %v", i, d, err)
		}
	})
}

// BenchmarkRedisLeaseRenewal: lease mode's call on a hot key shared by two
// instances: each key has a record of each of two holders, which take
// turns renewing theirs (all of the lease spent, 20 tokens more wanted),
// as the renewers of two instances do.
func BenchmarkRedisLeaseRenewal(b *testing.B) {
	t0 := time.Now().UnixMicro()
	type rec struct {
		epoch int64
		held  float64
	}
	recs := map[string]*rec{}
	holder := func(i int) string { return "host-" + strconv.Itoa(i/benchKeyCount%2) + " 1" }
	benchRedisCalls(b, func(i int, key string) Call {
		h := holder(i)
		r := recs[key+h]
		if r == nil {
			r = &rec{}
			recs[key+h] = r
		}
		return Call{Op: Lease, Limit: benchRedisLimit, At: t0 + int64(i), Lease: bucket.LeaseCall{
			Holder: h, Epoch: r.epoch, Consumed: r.held, Want: 20, TTL: 4_000_000}}
	}, func(i int, v any) {
		l, err := ParseLease(v)
		if err != nil || l.Held != 20 {
			b.Fatalf("lease %d: %+v, %v", i, l, err)
		}
		r := recs["k"+strconv.Itoa(i%benchKeyCount)+holder(i)]
		r.epoch, r.held = l.Epoch, l.Held
	})
}
