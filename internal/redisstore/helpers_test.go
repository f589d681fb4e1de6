package redisstore

import (
	"context"
	"flag"
	"log/slog"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
)

// shortParallel is how many tests run at once under -short (unless
// -parallel says otherwise): seven tests form a Redis Cluster of their own,
// which waits 2 s on Redis using no CPU, and at the default of one test per
// CPU they would queue two by two; eight let them all form at once. The
// full suite keeps the default: under -race their bursts of clients need
// the CPUs.
const shortParallel = 8

func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if testing.Short() && !given {
		if err := flag.Set("test.parallel", strconv.Itoa(shortParallel)); err != nil {
			panic(err) // the testing package defines the flag
		}
	}
	os.Exit(m.Run())
}

// storeOptions are ClientOptions' settings (the address is the test's).
func storeOptions() *redis.Options {
	o, err := ClientOptions("redis://127.0.0.1:1")
	if err != nil {
		panic(err)
	}
	return o
}

// clusterOptions are ClusterClientOptions' settings.
func clusterOptions() *redis.ClusterOptions { return ClusterClientOptions(nil) }

// exactTimeout is the Timeout of tests that check Redis's exact decisions
// rather than timing: long enough that a loaded machine cannot turn an
// answer into the policy's.
const exactTimeout = 5 * time.Second

// startStore starts a Store on client with cfg (Client set to client) and
// closes it when the test ends.
func startStore(t testing.TB, client redis.UniversalClient, cfg Config) *Store {
	t.Helper()
	cfg.Client = client
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// loadScript loads the script through s, with a generous timeout.
func loadScript(t testing.TB, s *Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.LoadScript(ctx); err != nil {
		t.Fatalf("LoadScript: %v", err)
	}
}

func acquireOp(key string, l bucket.Limit, cost float64) decide.Request {
	return decide.Request{Kind: decide.Acquire, Key: []byte(key), Limit: l, Cost: cost}
}

func peekOp(key string, l bucket.Limit, cost float64) decide.Request {
	return decide.Request{Kind: decide.Peek, Key: []byte(key), Limit: l, Cost: cost}
}

func resetOp(key string) decide.Request {
	return decide.Request{Kind: decide.Reset, Key: []byte(key)}
}

// run1 runs one op on a new Caller of s and returns its result.
func run1(t testing.TB, s *Store, op decide.Request) decide.Answer {
	t.Helper()
	return runOps(t, s, op)[0]
}

// runOps runs ops in one Run of a new Caller and returns copies of the
// results.
func runOps(t testing.TB, s *Store, ops ...decide.Request) []decide.Answer {
	t.Helper()
	c := s.NewCaller()
	for _, op := range ops {
		c.Add(op)
	}
	rs, err := c.Run()
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return append([]decide.Answer(nil), rs...)
}

// redisMicros returns Redis's TIME in Unix microseconds.
func redisMicros(t testing.TB, rdb redis.Cmdable) int64 {
	t.Helper()
	tm, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	return tm.UnixMicro()
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	return addr
}

// nodeClient returns a plain client of the node at addr, closed when the
// test ends.
func nodeClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() }) // the node may have been stopped
	return c
}
