package shard

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/decide"
)

// TestHashTagsFollowRedisCluster: the tag rules of Redis Cluster's key
// hashing (the part between the first '{' and the next '}', unless
// empty), the same for byte and string keys.
func TestHashTagsFollowRedisCluster(t *testing.T) {
	for _, tc := range []struct{ key, tag string }{
		{"{user1000}.following", "user1000"},
		{"foo{bar}{zap}", "bar"},
		{"foo{{bar}}zap", "{bar"},
		{"foo{}{bar}", ""}, // empty first tag: the whole key
		{"{}", ""},
		{"no tag", ""},
		{"{unclosed", ""},
		{"a}b{c}", "c"},
		{"tb:{user:1}:minute", "user:1"},
	} {
		tag, ok := hashTag([]byte(tc.key))
		if got := string(tag); ok != (tc.tag != "") || got != tc.tag {
			t.Errorf("hashTag(%q) = %q, %v; want %q", tc.key, got, ok, tc.tag)
		}
	}
	g, _ := newTestGroup(t, Config{Shards: 32})
	for i := range 1000 {
		k := fmt.Sprintf("k%d{t%d}x%d", i, i%7, i)
		sb, hb := g.route([]byte(k))
		ss, hs := g.routeString(k)
		tagShard, _ := g.route([]byte(fmt.Sprintf("t%d", i%7)))
		if sb != ss || hb != hs || sb != tagShard {
			t.Fatalf("%q: route %d/%x, routeString %d/%x, its tag's shard %d", k, sb, hb, ss, hs, tagShard)
		}
	}
}

// TestCoTaggedKeysShareAShardButNotASlot: the keys of a several-limit
// policy ({K}:minute, {K}:day) and TB.MACQUIRE over co-tagged keys live
// on one shard, so their group needs no vote; each key still has its own
// hash, so they do not pile up on one slot of the shard's table.
func TestCoTaggedKeysShareAShardButNotASlot(t *testing.T) {
	g, _ := newTestGroup(t, Config{Shards: 32})
	c := g.NewCaller()
	for i := range 200 {
		base := fmt.Sprintf("{tb:user:%d}", i)
		reqs := []decide.Request{acquire(base+":second", 10, 10, 1), acquire(base+":minute", 100, 1, 1), acquire(base+":day", 1000, 0.01, 1)}
		c.AddAll(reqs)
		if len(c.used) != 1 {
			t.Fatalf("%s: the group's keys span %d shards, want 1", base, len(c.used))
		}
		if c.nvotes != 0 {
			t.Fatalf("%s: a group on one shard took a vote", base)
		}
		_, h0 := g.route(reqs[0].Key)
		_, h1 := g.route(reqs[1].Key)
		if h0 == h1 {
			t.Fatalf("%s: two co-tagged keys have one hash", base)
		}
		if _, err := c.Run(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestVotesMeetingCloseAllReturn: callers running groups across shards
// and transactions while the group closes: every Run returns, with its
// answers or ErrClosed, and Close returns. A vote whose batches were
// posted is completed by the shards' last drain.
func TestVotesMeetingCloseAllReturn(t *testing.T) {
	g := New(Config{Shards: 8, SweepInterval: time.Hour})
	keys := keysOnDistinctShards(t, g, 8)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			c := g.NewCaller()
			for r := 0; ; r++ {
				a, b := keys[(w+r)%8], keys[(w+3*r+1)%8]
				if string(a) != string(b) {
					c.AddAll([]decide.Request{acquire(string(a), 1e9, 1, 1), acquire(string(b), 1e9, 1, 1)})
				}
				c.Add(acquire(string(keys[r%8]), 1e9, 1, 1))
				if _, err := c.Run(); err == ErrClosed {
					return
				} else if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	time.Sleep(20 * time.Millisecond) // real time: let the callers run
	if !within(5*time.Second, g.Close) {
		t.Fatal("Close did not return within 5 s while groups across shards ran")
	}
	if !within(5*time.Second, wg.Wait) {
		t.Fatal("callers did not all return within 5 s of Close")
	}
}
