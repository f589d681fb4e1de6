package testkit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Burst has every client send calls copies of the command args at the same
// moment (each client is connected first, then a gate opens for all), and
// returns the sum of the integer replies: for TB.ACQUIRE, how many calls
// were allowed. It is for tests of limits shared by racing callers. A
// failed call fails the test.
func Burst(t testing.TB, clients []*redis.Client, calls int, args ...any) int64 {
	t.Helper()
	ctx := context.Background()
	for _, c := range clients {
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("connecting before the burst: %v", err)
		}
	}
	var sum atomic.Int64
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			for range calls {
				v, err := c.Do(ctx, args...).Int64()
				if err != nil {
					t.Errorf("%v: %v", args, err)
					return
				}
				sum.Add(v)
			}
		}()
	}
	close(gate)
	wg.Wait()
	return sum.Load()
}
