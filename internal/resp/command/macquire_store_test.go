package command_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/redisstore"
	"github.com/bucketd/bucketd/internal/redistest"
	"github.com/bucketd/bucketd/internal/resp"
	"github.com/bucketd/bucketd/internal/resp/command"
	"github.com/bucketd/bucketd/internal/testkit/testserver"
)

// storeServer serves the protocol with a Redis store on client, under
// prefix, and the policies of policyFile.
func storeServer(t *testing.T, client redis.UniversalClient, prefix string) *testserver.Server {
	t.Helper()
	s, err := redisstore.New(redisstore.Config{
		Client: client, Prefix: prefix,
		Timeout: 5 * time.Second, // Redis decides, never the failure policy, on a loaded machine
		Logger:  slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.LoadScript(ctx); err != nil {
		t.Fatal(err)
	}
	ts := testserver.Serve(t, command.Config{Limiter: s}, resp.Config{})
	ts.Commands.SetPolicies(loadPolicies(t, policyFile))
	return ts
}

// TestGroupsInStoreMode: TB.MACQUIRE and the policies' groups in store
// mode, on a standalone Redis and on a three-master Redis Cluster, each
// group one script call: the policy steps of the memory test (the same
// replies, but for the milliseconds that pass), the concurrency test, and
// on the cluster, CROSSSLOT for keys in several slots and success with a
// shared hash tag.
func TestGroupsInStoreMode(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		name := "standalone"
		if cluster {
			name = "cluster"
		}
		t.Run(name, func(t *testing.T) {
			var client redis.UniversalClient
			if cluster {
				client = redistest.StartCluster(t, 3).Client(redisstore.ClusterClientOptions(nil))
			} else {
				o, err := redisstore.ClientOptions("redis://127.0.0.1:1")
				if err != nil {
					t.Fatal(err)
				}
				client = redistest.Start(t).Client(o)
			}
			t.Run("policies", func(t *testing.T) {
				ts := storeServer(t, client, "policies:")
				cl := ts.Client(t)
				runCalls(t, ts, cl, policySteps)
				expectPolicyCounts(t, cl, policyCounts)
			})
			t.Run("all or nothing", func(t *testing.T) {
				ts := storeServer(t, client, "aon:")
				runCalls(t, ts, ts.Client(t), []call{
					c("1", "TB.ACQUIRE", "{k}:b", 5, 0.001, 4),
					c("[0 [1 10 0 0] [0 1 1000000 4000000]]", "TB.MACQUIRE", 2, "{k}:a", 10, 0.001, "{k}:b", 5, 0.001, "COST", 2, "WITHINFO"),
					c("[1 [1 10 0 0] [1 1 0 0]]", "TB.MACQUIRE", 2, "{k}:a", 10, 0.001, "{k}:c", 1, 0.001, "COST", 0, "WITHINFO"),
					c("[1 [1 9 0 1000000] [1 0 0 5000000]]", "TB.MACQUIRE", 2, "{k}:a", 10, 0.001, "{k}:b", 5, 0.001, "WITHINFO"),
					c("[0 [1 9 0 1000000] [0 0 -1 5000000]]", "TB.MACQUIRE", 2, "{k}:a", 10, 0.001, "{k}:b", 5, 0.001, "COST", 6, "WITHINFO"),
					c("2", "TB.RESET", "{k}:a", "{k}:b", "{k}:c"),
				})
				// In MULTI/EXEC, a group is part of the transaction Redis runs.
				ctx := context.Background()
				tx, err := ts.Client(t).TxPipelined(ctx, func(p redis.Pipeliner) error {
					p.Do(ctx, "TB.MACQUIRE", 2, "{k}:x", 2, 0.001, "{k}:y", 1, 0.001)
					p.Do(ctx, "TB.MACQUIRE", 2, "{k}:x", 2, 0.001, "{k}:y", 1, 0.001, "WITHINFO")
					p.Do(ctx, "TB.ACQUIRE", "{k}:x", 2, 0.001)
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, cmd := range tx {
					got = append(got, fmt.Sprint(cmd.(*redis.Cmd).Val()))
				}
				if want := "1 [0 [1 1 0 1000000] [0 0 1000000 1000000]] 1"; !near(strings.Join(got, " "), want) {
					t.Fatalf("transaction: %s\nwant %s", strings.Join(got, " "), want)
				}
			})
			t.Run("concurrency", func(t *testing.T) {
				burstGroups(t, storeServer(t, client, "burst:"))
			})
			if !cluster {
				return
			}
			t.Run("slots", func(t *testing.T) {
				ts := storeServer(t, client, "slots:")
				cl := ts.Client(t)
				const crossSlot = "ERROR CROSSSLOT Keys in request don't hash to the same slot"
				runCalls(t, ts, cl, []call{
					c(crossSlot, "TB.MACQUIRE", 2, "user:1", 10, 1, "org:1", 10, 1),
					c("1", "TB.MACQUIRE", 2, "{org:1}:user:1", 10, 1, "{org:1}", 10, 1),
					// A policy's buckets share the slot of {key}.
					c("[1 0 0 43200000]", "TB.ACQUIRE", "user:1", "POLICY", "trial", "WITHINFO"),
				})
				_, err := cl.TxPipelined(context.Background(), func(p redis.Pipeliner) error {
					p.Do(context.Background(), "TB.MACQUIRE", 1, "user:1", 10, 1)
					p.Do(context.Background(), "TB.ACQUIRE", "org:1", 10, 1)
					return nil
				})
				if err == nil || err.Error() != "CROSSSLOT Keys in request don't hash to the same slot" {
					t.Fatalf("EXEC over two slots: %v", err)
				}
			})
		})
	}
}
