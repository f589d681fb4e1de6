package shard

import (
	"errors"
	"sync/atomic"
)

// Snapshots: a walk hands out the live buckets of every shard as they
// were at one cut, a point in every shard's queue order, while the shards
// go on serving. The cut is a task posted to every shard in one step, as
// a Run is (Group.postAll), so every Run stands before it on all the
// shards it touches or after it on all of them (invariant 1): a
// transaction or a group is in the walk for all its buckets or for none
// (invariant 8).
//
// From its cut on, a shard keeps what the walk will still hand out as it
// was at the cut, copy on write: every entry carries a phase bit, and the
// cut flips the shard's, so each entry then differs from it (pending: its
// state is still the one at the cut). The walk hands out a pending entry
// when it reaches it and sets the entry's phase. An entry that is about
// to change or go while pending is copied first (shard.keep), as is a
// pending entry that a deletion moves to where the walk has been (a
// removal moves the table's last entry into the hole); its phase is set,
// and a chunk hands the copy out: the next one at that shard, whether it
// is the shard being walked or one the walk has yet to reach (each chunk
// also takes the copies of one of those, in turn). A new entry takes the
// shard's phase: it is newer than the cut, and the walk leaves it out.
// So the cut costs nothing to take, and memory holds, besides the chunk,
// one copy (48 bytes and the key) of each bucket that changed, went or
// moved since the walk last called at its shard and before the walk
// reached it: never more than one per bucket, and never a copy of
// buckets nobody touched.

// Walk hands out the live buckets of every shard (full ones left out) as
// they were at its cut, a chunk at a time, shard after shard: the shards
// serve clients between chunks, and the caller holds one chunk. Every
// bucket that exists at the cut is handed out exactly once, with its state
// at the cut, unless it is full by the time the walk reaches it (it then
// answers as an absent one would); a bucket created after the cut is not
// handed out, and one changed, reset, evicted or expired after it is
// handed out as it was at the cut. A Walk is used by one goroutine; Stop
// it when giving up before the end, or the shards keep copies for it.
type Walk struct {
	g     *Group
	id    uint64
	shard int // the shard being walked
	drain int // the later shard whose copies the next chunk takes (later)
	done  bool
}

// ErrWalkEnded is returned by Walk.Next when the shards no longer run
// that walk: it was stopped, or another walk replaced it.
var ErrWalkEnded = errors.New("shard: walk ended")

// walkIDs numbers the walks, so a shard can tell its current walk from
// one that it has forgotten.
var walkIDs atomic.Uint64

// Walk takes a cut of every shard and returns a walk over it. It posts
// the cut to all shards in one step and waits until each has reached it.
// Only one walk is in progress: starting another ends this one on every
// shard it has not finished.
func (g *Group) Walk() (*Walk, error) {
	w := &Walk{g: g, id: walkIDs.Add(1)}
	calls := make([]*call, len(g.shards))
	tasks := make([]task, len(g.shards))
	for i := range calls {
		calls[i] = &call{fn: func(s *shard, _ int64) { s.startWalk(w.id) }, done: make(chan struct{})}
		tasks[i] = calls[i]
	}
	if err := g.postAll(tasks); err != nil {
		return nil, err
	}
	for _, c := range calls {
		<-c.done // a posted call always runs, even after Close (invariant 4)
	}
	return w, nil
}

// Next appends to dst up to max buckets: first copies kept by one of the
// shards the walk has yet to reach (the next of them in turn), then the
// live buckets among as many of the next entries of the shard being
// walked as are left of max. It reports whether the walk is complete
// (every shard has then forgotten it). A chunk may hold fewer than max
// buckets, none at all, before the walk is complete. Taking the later
// shards' copies as it goes is what keeps them from piling up there
// while the walk is still on earlier shards: they are held from when they
// are made until the walk next calls at their shard.
func (w *Walk) Next(dst []Record, max int) ([]Record, bool, error) {
	if w.done {
		return dst, true, nil
	}
	from := len(dst)
	if j := w.later(); j >= 0 {
		if err := w.at(j, func(s *shard, _ int64) { dst = s.walk.copies(s, dst, max) }); err != nil {
			return dst, false, err
		}
	}
	left := max - (len(dst) - from)
	if left <= 0 {
		return dst, false, nil
	}
	var shardDone bool
	err := w.at(w.shard, func(s *shard, now int64) {
		dst, shardDone = s.walk.next(s, dst, left, now)
		if shardDone {
			s.endWalk()
		}
	})
	if err != nil {
		return dst, false, err
	}
	if shardDone {
		w.shard++
		w.done = w.shard == len(w.g.shards)
	}
	return dst, w.done, nil
}

// later returns the shard, after the one being walked, whose copies the
// next chunk takes first (each of them in turn), or -1 when there is none.
func (w *Walk) later() int {
	n := len(w.g.shards)
	if w.shard+1 >= n {
		return -1
	}
	if w.drain <= w.shard || w.drain >= n {
		w.drain = w.shard + 1
	}
	w.drain++
	return w.drain - 1
}

// at runs fn on shard i, whose state of this walk is s.walk; it returns
// ErrWalkEnded, having run nothing, when the shard no longer runs it.
func (w *Walk) at(i int, fn func(s *shard, now int64)) error {
	var ended bool
	err := w.g.on(i, func(s *shard, now int64) {
		if s.walk == nil || s.walk.id != w.id {
			ended = true
			return
		}
		fn(s, now)
	})
	if err == nil && ended {
		err = ErrWalkEnded
	}
	return err
}

// Stop ends the walk before it is complete; after the end it does nothing.
func (w *Walk) Stop() error {
	if w.done {
		return nil
	}
	w.done = true
	for i := w.shard; i < len(w.g.shards); i++ {
		err := w.g.on(i, func(s *shard, _ int64) {
			if s.walk != nil && s.walk.id == w.id {
				s.endWalk()
			}
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// walk is a Walk's state on its shard. Entries below cursor have been
// handed out or were not pending when the walk reached them; an entry
// below the cursor is never pending (removeAt keeps one before it moves
// there). saved holds the copies taken before the walk reached their
// entries, not handed out yet; their keys are in keys, which each copy's
// keyOff and keyLen point into.
type walk struct {
	id     uint64
	cursor int
	saved  []entry
	keys   []byte
}

// startWalk runs at a cut: it ends the walk in progress, if any, and
// flips the shard's phase, which makes every entry pending.
func (s *shard) startWalk(id uint64) {
	s.endWalk()
	s.phase = !s.phase
	s.walk = &walk{id: id}
}

// endWalk forgets the walk in progress, if any. The entries it had not
// reached take the shard's phase, so that every entry's equals the
// shard's again and the next cut makes them all pending; after a
// complete walk there are none, and after one given up early this is one
// pass over the rest of the table.
func (s *shard) endWalk() {
	if s.walk == nil {
		return
	}
	for i := s.walk.cursor; i < s.t.len(); i++ {
		s.t.entries[i].phase = s.phase
	}
	s.walk = nil
}

// changing runs before entry i changes, goes, or moves below the cursor:
// a pending entry is kept for the walk first. The check is one byte, so
// the hot path pays nothing for it outside walks.
func (s *shard) changing(i int32) {
	if s.t.entries[i].phase != s.phase {
		s.keep(i)
	}
}

// keep copies pending entry i's state, which is its state at the cut,
// for the next chunk to hand out, and marks the entry handed out. A copy
// full at this instant (the running task's, s.last) is not kept: it
// would answer as an absent bucket, as it does for the walk when the walk
// reaches an entry that is full by then.
func (s *shard) keep(i int32) {
	e := &s.t.entries[i]
	e.phase = s.phase
	if e.full(s.last) { // the task's instant (see tick)
		return
	}
	w := s.walk
	c, key := *e, s.t.key(e)
	c.keyOff, c.keyLen = uint32(len(w.keys)), uint32(len(key))
	w.keys = append(w.keys, key...)
	w.saved = append(w.saved, c)
}

// copies appends up to max of the copies kept for the walk and not yet
// handed out. A copy is handed out without a second look at the clock:
// its entry may have changed since, and the copy refilled to now could
// look full while the bucket is not (a restore leaves a full record out
// anyway).
func (w *walk) copies(s *shard, dst []Record, max int) []Record {
	for ; max > 0 && len(w.saved) > 0; max-- {
		c := &w.saved[len(w.saved)-1]
		dst = append(dst, c.record(w.keys[c.keyOff:c.keyOff+c.keyLen], s.base))
		w.keys = w.keys[:c.keyOff] // the keys were appended in the copies' order
		w.saved = w.saved[:len(w.saved)-1]
	}
	return dst
}

// next appends the live buckets among the next max entries, kept copies
// first, and reports whether the walk of this shard is complete.
func (w *walk) next(s *shard, dst []Record, max int, now int64) ([]Record, bool) {
	from := len(dst)
	dst = w.copies(s, dst, max)
	for max -= len(dst) - from; max > 0 && w.cursor < s.t.len(); max-- {
		if e := &s.t.entries[w.cursor]; e.phase != s.phase {
			e.phase = s.phase
			if !e.full(now) {
				dst = append(dst, e.record(s.t.key(e), s.base))
			}
		}
		w.cursor++
	}
	return dst, len(w.saved) == 0 && w.cursor >= s.t.len()
}
