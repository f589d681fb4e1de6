package redisstore

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/redisscript"
)

// lane is the queue, the dispatcher and the workers that send pipelines to
// one Redis server: the standalone Redis (the store's only lane), or one
// master of a cluster (a lane per master, made when a key first routes to
// it). A cluster's lanes share nothing but the store's counters, so a master
// that is down or slow holds and fails only the operations of its own
// slots; the others' pipelines never wait for it.
type lane struct {
	s *Store
	// addr is the master's address; "" for a standalone Redis.
	addr string
	// node is the master's client, go-redis's own (cluster.MasterForKey),
	// which go-redis may replace; routing stores the latest. nil for a
	// standalone Redis, whose client is the store's.
	node  atomic.Pointer[redis.Client]
	queue chan *part
	idle  chan *worker // workers ready for a pipeline
}

// laneIdle is how long a cluster lane waits without work before it stops
// its goroutines (Store.laneIdle; tests shorten it): a master that left the
// cluster (a failover, a new address) leaves no goroutines behind. A
// master that gets keys again gets a new lane.
const laneIdle = time.Minute

// newLane makes a lane and starts its dispatcher and workers. Called at New
// (standalone) or under the store's mu with the store open (cluster).
func newLane(s *Store, addr string) *lane {
	l := &lane{
		s:    s,
		addr: addr,
		// Room for every connection of a busy server to wait without
		// blocking; beyond that Run waits (back-pressure, bounded by the
		// dispatcher, which answers expired operations at once).
		queue: make(chan *part, 4*s.cfg.MaxBatch*s.cfg.Pipelines),
		idle:  make(chan *worker, s.cfg.Pipelines),
	}
	for range s.cfg.Pipelines {
		w := &worker{l: l, in: make(chan *pipe, 1)}
		l.idle <- w
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			w.run()
		}()
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		l.dispatch()
	}()
	return l
}

// send sends the worker's batch to the lane's server and returns how many
// EVAL it sent.
func (l *lane) send(ctx context.Context, b *redisscript.Batch) int {
	if l.s.cluster == nil {
		return b.Send(ctx, l.s.client)
	}
	return b.SendNode(ctx, l.node.Load(), l.s.cluster)
}

// take returns the next part from the queue, false once the queue is
// closed. A cluster lane that waits laneIdle for one retires.
func (l *lane) take(idle *time.Timer) (*part, bool) {
	select {
	case p, ok := <-l.queue:
		return p, ok
	default:
	}
	if l.addr == "" {
		p, ok := <-l.queue
		return p, ok
	}
	idle.Reset(l.s.laneIdle)
	defer idle.Stop()
	for {
		select {
		case p, ok := <-l.queue:
			return p, ok
		case <-idle.C:
			// Closes the queue unless a part came meanwhile. Once it has,
			// stop here: the timer may fire again before the select sees
			// the closed queue, and a second retire would close it twice.
			if l.s.retire(l) {
				return nil, false
			}
			idle.Reset(l.s.laneIdle)
		}
	}
}

// errSlotsUnknown answers operations that arrive before the store has
// learned a cluster's slot map (the cluster was unreachable so far).
var errSlotsUnknown = errors.New("redisstore: the Redis Cluster's slot map is not known yet (no node answered CLUSTER SLOTS)")

// route puts each Redis operation of c into the part of its lane and
// returns true, or returns the address of a master that has no lane yet
// (the caller makes one and routes again). Operations that cannot be
// routed go to c.unrouted with the error. Called under the store's mu
// (shared).
func (s *Store) route(c *Caller) (missing string, ok bool) {
	c.resetParts()
	if s.cluster == nil {
		p := c.part(s.single)
		for i := range c.ops {
			if !c.ops[i].local {
				p.ops = append(p.ops, int32(i))
			}
		}
		return "", true
	}
	for i := range c.ops {
		o := &c.ops[i]
		if o.local || o.span == 0 {
			continue // a group's other members go with its first
		}
		// A group's keys share a slot (Run checked): its first key's
		// master is every member's.
		l, addr, err := s.laneFor(o.Key)
		switch {
		case err != nil:
			c.unrouted = appendSpan(c.unrouted, i, o.span)
			c.routeErr = err
		case l == nil:
			return addr, false
		default:
			p := c.part(l)
			p.ops = appendSpan(p.ops, i, o.span)
		}
	}
	return "", true
}

// appendSpan appends the indexes i to i+span-1 to ops.
func appendSpan(ops []int32, i int, span int32) []int32 {
	for j := int32(i); j < int32(i)+span; j++ {
		ops = append(ops, j)
	}
	return ops
}

// laneFor returns the lane of the master that owns key's slot; a nil lane
// and the master's address when it has none yet.
func (s *Store) laneFor(key []byte) (*lane, string, error) {
	if !s.slotsKnown.Load() {
		return nil, "", errSlotsUnknown
	}
	// With the slot map loaded, MasterForKey reads it and does no I/O, so
	// the context does not matter (a stale map is reloaded in go-redis's
	// background).
	node, err := s.cluster.MasterForKey(context.Background(), s.cfg.Prefix+string(key))
	if err != nil {
		return nil, "", err
	}
	addr := node.Options().Addr
	l := s.lanes[addr]
	if l == nil {
		return nil, addr, nil
	}
	if l.node.Load() != node {
		l.node.Store(node)
	}
	return l, "", nil
}

// addLane makes the lane of the master at addr unless it exists or the
// store is closed.
func (s *Store) addLane(addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.lanes[addr] != nil {
		return
	}
	s.lanes[addr] = newLane(s, addr)
}

// retire takes an idle cluster lane out of the store and closes its queue,
// which stops its goroutines, and reports whether it did; nothing is lost,
// since a part only enters the queue under mu (shared) and retire holds it
// exclusively. It only tries: a Run holding mu (shared) may be waiting for
// room in another lane's queue, and the dispatcher calling retire must
// never wait for that (it tries again after the next idle period).
func (s *Store) retire(l *lane) bool {
	if !s.mu.TryLock() {
		return false
	}
	defer s.mu.Unlock()
	if s.closed || len(l.queue) > 0 {
		return false // Close closes the queue; a part came meanwhile
	}
	delete(s.lanes, l.addr)
	close(l.queue)
	return true
}

// learnSlots waits until the store knows the cluster's slot map, asking
// the maintenance goroutine to learn it, until deadline at the latest.
func (s *Store) learnSlots(deadline time.Time) {
	select {
	case s.learn <- struct{}{}:
	default: // a request is pending already
	}
	t := time.NewTimer(time.Until(deadline)) // only until the map is known
	defer t.Stop()
	select {
	case <-s.slotsLearned:
	case <-t.C:
	case <-s.stopped.Done():
	}
}

// learnPause is how long the maintenance goroutine waits after a failed
// attempt to learn the slot map, so that a cluster that is down is not
// asked in a tight loop while requests keep coming.
const learnPause = 250 * time.Millisecond

// learnSlotMap loads the cluster's slot map (go-redis loads it the first
// time it routes a key) and reports whether it is known now.
func (s *Store) learnSlotMap() bool {
	ctx, cancel := context.WithTimeout(s.stopped, max(dbsizeTimeout, s.cfg.Timeout))
	defer cancel()
	if _, err := s.cluster.MasterForKey(ctx, ""); err != nil {
		s.countError(err)
		s.logError("learning the cluster's slot map (CLUSTER SLOTS) failed", err, 0, "")
		return false
	}
	s.slotsKnownNow()
	return true
}

// slotsKnownNow records that go-redis holds the cluster's slot map: it
// never forgets one once loaded, so routing never waits for I/O again.
func (s *Store) slotsKnownNow() {
	if s.slotsKnown.CompareAndSwap(false, true) {
		close(s.slotsLearned)
	}
}

// reloadSlotMap asks go-redis to reload the cluster's slot map in the
// background, at most once a second: after a master failed to answer, the
// cluster may have moved its slots to a replica.
func (s *Store) reloadSlotMap() {
	now := time.Since(s.epoch).Nanoseconds()
	last := s.lastReload.Load()
	if now-last < int64(time.Second) || !s.lastReload.CompareAndSwap(last, now) {
		return
	}
	s.cluster.ReloadState(context.Background()) // asynchronous in go-redis
}
