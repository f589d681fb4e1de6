// Command go is the bucketd example for Go, with go-redis: a burst of 12
// TB.ACQUIRE calls on a bucket of capacity 10 refilling at 1 token per
// second (10 allowed, 2 denied), one TB.ACQUIRE ... WITHINFO to see how long
// to wait, then TB.RESET.
//
//	BUCKETD_ADDR=127.0.0.1:6380 go run ./examples/go
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	capacity = 10 // the bucket holds at most 10 tokens
	rate     = 1  // and refills at 1 token per second
)

func main() {
	addr := os.Getenv("BUCKETD_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6380"
	}
	ctx := context.Background()
	// Default options: bucketd speaks RESP2 and RESP3, as Redis does.
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()

	// A key of its own per run, so runs don't share a bucket.
	key := fmt.Sprintf("example:go:%d", time.Now().UnixNano())

	// TB.ACQUIRE key capacity rate [cost] answers 1 (allowed) or 0 (denied).
	for i := 1; i <= 12; i++ {
		allowed, err := rdb.Do(ctx, "TB.ACQUIRE", key, capacity, rate).Int()
		if err != nil {
			log.Fatalf("TB.ACQUIRE: %v", err)
		}
		if allowed == 1 {
			fmt.Printf("acquire %d: allowed\n", i)
		} else {
			fmt.Printf("acquire %d: denied\n", i)
		}
	}

	// With WITHINFO: [allowed, remaining, retry_after_ms, reset_after_ms].
	info, err := rdb.Do(ctx, "TB.ACQUIRE", key, capacity, rate, 1, "WITHINFO").Int64Slice()
	if err != nil {
		log.Fatalf("TB.ACQUIRE WITHINFO: %v", err)
	}
	fmt.Printf("withinfo: allowed=%d remaining=%d retry_after_ms=%d reset_after_ms=%d\n",
		info[0], info[1], info[2], info[3])

	// TB.RESET key [key ...] answers how many buckets it removed.
	n, err := rdb.Do(ctx, "TB.RESET", key).Int()
	if err != nil {
		log.Fatalf("TB.RESET: %v", err)
	}
	fmt.Printf("reset: %d\n", n)
}
