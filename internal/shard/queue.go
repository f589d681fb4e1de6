package shard

import "sync"

// queue is a shard's inbox: the tasks waiting for the shard's goroutine,
// in the order they were posted. Many goroutines post; only the shard's
// goroutine takes, all waiting tasks at once.
//
// It is a mutex and a slice rather than a channel so that a Run across
// shards can hold several queues at once (post) and put one batch in
// each, in one step that no other post can interleave with: that is what
// gives every shard the same order of cross-shard work. The mutex guards
// the slice only; nobody waits for a shard while holding it (a post never
// waits for room: see the package doc's invariant on bounds), only for the
// next queue's mutex, taken in ascending order by posts and Close alike.
type queue struct {
	mu     sync.Mutex
	tasks  []task
	closed bool // Close was called (Group.Close sets it): posts fail, the owner drains and stops
	idle   bool // the owner found nothing and waits for wake

	// wake tells an idle owner that a task arrived, or that the queue
	// closed. It holds at most one signal; a stale one only costs the
	// owner a look at an empty queue.
	wake chan struct{}
}

func newQueue() *queue { return &queue{wake: make(chan struct{}, 1)} }

// put posts one task; ErrClosed once the queue is closed.
func (q *queue) put(t task) error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return ErrClosed
	}
	wake := q.pushLocked(t)
	q.mu.Unlock()
	if wake {
		q.ring()
	}
	return nil
}

// pushLocked appends t; the caller holds mu and has checked closed. It
// reports whether the owner must be woken (after mu is released).
func (q *queue) pushLocked(t task) bool {
	q.tasks = append(q.tasks, t)
	wake := q.idle
	q.idle = false
	return wake
}

// ring wakes the owner, unless a signal is already waiting for it.
func (q *queue) ring() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take hands the owner every waiting task, leaving spare (emptied) as
// the new list, so two slices alternate and nothing is allocated in a
// steady state. With nothing waiting it marks the owner idle and returns
// no tasks; closed then says whether the owner should stop.
func (q *queue) take(spare []task) (tasks []task, closed bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.tasks) == 0 {
		q.idle = !q.closed
		return nil, q.closed
	}
	tasks, q.tasks = q.tasks, spare[:0]
	return tasks, false
}

// len is the number of tasks waiting, for the queue-depth gauge.
func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.tasks)
}
