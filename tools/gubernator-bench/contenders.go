package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	gubernator "github.com/gubernator-io/gubernator/v2"
	"github.com/redis/go-redis/v9"
)

// limit is the bucket every key has: capacity tokens, refilled at
// ratePerSec, starting full.
type limit struct {
	capacity   int64
	ratePerSec float64
}

// contender is one system under test: it opens clients to its instances.
type contender interface {
	name() string
	// dial opens client i (of a run whose keys carry runID) to instance
	// i % instances and checks that it answers.
	dial(ctx context.Context, i int, runID string) (client, error)
}

// client makes decisions on one connection; not safe for concurrent use.
type client interface {
	// decide asks once for each key of keys (indices) in one round trip
	// and sets granted[j] for keys[j]. A key whose decision failed counts
	// in errs and is not granted.
	decide(ctx context.Context, keys []int, granted []bool) (errs int, err error)
	close() error
}

// keyName is the name of key k in every contender.
func keyName(k int) string { return fmt.Sprintf("k%03d", k) }

// gubernatorContender asks two (or more) Gubernator peers with the GLOBAL
// behaviour and one algorithm.
type gubernatorContender struct {
	label     string
	addrs     []string
	algorithm gubernator.Algorithm
	lim       limit
	window    time.Duration // Gubernator's duration; 0: capacity/rate
}

func (g *gubernatorContender) name() string { return g.label }

// request is the RateLimitReq for the contender's bucket. Gubernator's
// limit is a count per duration: by default capacity tokens per
// capacity/rate seconds (window 0), or rate*window per window. For
// TOKEN_BUCKET that is a window which resets to full at its end; for
// LEAKY_BUCKET a leak of one token per duration/limit with burst capacity,
// the same bucket as bucketd's whatever the window.
func (g *gubernatorContender) request(runID string) *gubernator.RateLimitReq {
	lim, durMillis := g.lim.capacity, int64(float64(g.lim.capacity)/g.lim.ratePerSec*1000)
	if g.window > 0 {
		durMillis = g.window.Milliseconds()
		lim = int64(g.lim.ratePerSec * g.window.Seconds())
	}
	return &gubernator.RateLimitReq{
		Name:      "bench-" + runID,
		Hits:      1,
		Limit:     lim,
		Duration:  durMillis,
		Burst:     g.lim.capacity,
		Algorithm: g.algorithm,
		Behavior:  gubernator.Behavior_GLOBAL,
	}
}

func (g *gubernatorContender) dial(ctx context.Context, i int, runID string) (client, error) {
	addr := g.addrs[i%len(g.addrs)]
	c, err := gubernator.DialV1Server(addr, nil)
	if err != nil {
		return nil, fmt.Errorf("gubernator %s: %w", addr, err)
	}
	// A hit-less check on a key of its own opens the connection.
	warm := g.request("warm")
	warm.UniqueKey, warm.Hits = "warm", 0
	if _, err := c.GetRateLimits(ctx, &gubernator.GetRateLimitsReq{Requests: []*gubernator.RateLimitReq{warm}}); err != nil {
		return nil, fmt.Errorf("gubernator %s: %w", addr, err)
	}
	return &gubernatorClient{c: c, newReq: func() *gubernator.RateLimitReq { return g.request(runID) }}, nil
}

type gubernatorClient struct {
	c      gubernator.V1Client
	newReq func() *gubernator.RateLimitReq
	reqs   []*gubernator.RateLimitReq // reused: only UniqueKey changes between calls
}

func (c *gubernatorClient) decide(ctx context.Context, keys []int, granted []bool) (int, error) {
	for len(c.reqs) < len(keys) {
		c.reqs = append(c.reqs, c.newReq())
	}
	reqs := c.reqs[:len(keys)]
	for j, k := range keys {
		reqs[j].UniqueKey = keyName(k)
	}
	resp, err := c.c.GetRateLimits(ctx, &gubernator.GetRateLimitsReq{Requests: reqs})
	if err != nil {
		return len(keys), err
	}
	if len(resp.Responses) != len(keys) {
		return len(keys), fmt.Errorf("gubernator: %d responses to %d requests", len(resp.Responses), len(keys))
	}
	errs := 0
	for j, r := range resp.Responses {
		granted[j] = r.Error == "" && r.Status == gubernator.Status_UNDER_LIMIT
		if r.Error != "" {
			errs++
		}
	}
	return errs, nil
}

func (c *gubernatorClient) close() error { return nil }

// bucketdContender asks bucketd instances with TB.ACQUIRE, a pipeline of
// them per round trip.
type bucketdContender struct {
	label string
	addrs []string
	lim   limit
}

func (b *bucketdContender) name() string { return b.label }

func (b *bucketdContender) dial(ctx context.Context, i int, runID string) (client, error) {
	addr := b.addrs[i%len(b.addrs)]
	rdb := redis.NewClient(&redis.Options{
		Addr:            addr,
		Protocol:        2,
		DisableIdentity: true,
		PoolSize:        1,
		MaxRetries:      -1, // a failed decision counts as an error, never as a second try
		DialTimeout:     5 * time.Second,
		ReadTimeout:     5 * time.Second,
		WriteTimeout:    5 * time.Second,
	})
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close() // the error above is the one to report
		return nil, fmt.Errorf("bucketd %s: %w", addr, err)
	}
	return &bucketdClient{
		rdb:      rdb,
		prefix:   "gb:" + runID + ":",
		capacity: strconv.FormatInt(b.lim.capacity, 10),
		rate:     strconv.FormatFloat(b.lim.ratePerSec, 'f', -1, 64),
	}, nil
}

type bucketdClient struct {
	rdb            *redis.Client
	prefix         string
	capacity, rate string
	cmds           []*redis.Cmd
}

func (c *bucketdClient) decide(ctx context.Context, keys []int, granted []bool) (int, error) {
	if len(keys) == 1 {
		v, err := c.rdb.Do(ctx, "TB.ACQUIRE", c.prefix+keyName(keys[0]), c.capacity, c.rate, "1").Int64()
		if err != nil {
			return 1, err
		}
		granted[0] = v == 1
		return 0, nil
	}
	pipe := c.rdb.Pipeline()
	c.cmds = c.cmds[:0]
	for _, k := range keys {
		c.cmds = append(c.cmds, pipe.Do(ctx, "TB.ACQUIRE", c.prefix+keyName(k), c.capacity, c.rate, "1"))
	}
	_, err := pipe.Exec(ctx)
	var rerr redis.Error
	if err != nil && !errors.As(err, &rerr) {
		return len(keys), err // the connection failed: no reply is known
	}
	errs := 0
	for j, cmd := range c.cmds {
		v, err := cmd.Int64()
		granted[j] = err == nil && v == 1
		if err != nil {
			errs++
		}
	}
	return errs, nil
}

func (c *bucketdClient) close() error { return c.rdb.Close() }
