package redisstore

import (
	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/redisscript"
)

// All-or-nothing groups (TB.MACQUIRE) in store mode: one script call with
// every key of the group (the script's acquireall), which checks every
// bucket at one Redis TIME and takes from all or none. The group travels
// as one unit: routed by its first key (on a cluster, its keys share a
// slot, or Run answers CROSSSLOT without sending anything), never split
// across pipelines or commands, and answered, by Redis or by the policy,
// as a whole, through its first operation's answered flag.

// AddAll queues reqs, Acquire requests on distinct keys with one cost, as
// one all-or-nothing group, with the meaning of shard.Caller.AddAll: either
// every bucket holds the cost and each gives it, or none changes (not even
// the refill a denied TB.ACQUIRE stores). Each request's answer is that
// bucket's: allowed when it alone held the cost, its remaining tokens after
// the decision; the group was allowed when every answer is. A key of
// another type answers decide.ErrWrongType and fails the group. On a Redis
// Cluster, keys in different hash slots (with the prefix, {hash tags}
// honoured) answer decide.ErrCrossSlot, all of them, and nothing is sent.
// When Redis fails, every request gets the --on-redis-error answer. The
// group counts as one decision. Each r.Key must stay valid until Run
// returns.
func (c *Caller) AddAll(reqs []decide.Request) {
	for k, r := range reqs {
		r.Kind = decide.Acquire
		o := op{Request: r, group: true}
		if k == 0 {
			o.span = int32(len(reqs))
		}
		c.ops = append(c.ops, o)
	}
}

// sameSlot reports whether the keys of the group that starts at op i hash
// to one Redis Cluster slot, with the store's prefix.
func (c *Caller) sameSlot(i int) bool {
	first := c.slot(c.ops[i].Key)
	for j := i + 1; j < i+int(c.ops[i].span); j++ {
		if c.slot(c.ops[j].Key) != first {
			return false
		}
	}
	return true
}

// slot returns the Redis Cluster slot of key with the store's prefix.
func (c *Caller) slot(key []byte) uint16 {
	c.keyBuf = append(append(c.keyBuf[:0], c.s.cfg.Prefix...), key...)
	return keySlot(c.keyBuf)
}

// keySlot is Redis Cluster's hash slot of key: CRC16 (XMODEM) of the key,
// or of its hash tag (between the first '{' and the first '}' after it,
// when that is not empty), mod 16384.
func keySlot(key []byte) uint16 {
	for i, b := range key {
		if b != '{' {
			continue
		}
		for j, e := range key[i+1:] {
			if e == '}' {
				if j > 0 {
					key = key[i+1 : i+1+j]
				}
				break
			}
		}
		break
	}
	var crc uint16
	for _, b := range key {
		crc ^= uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

// settleGroup answers the group whose first ref is i with its replies in
// b, unless the timer answered it: each member its bucket's decision (or
// ErrWrongType), or, when any member's reply is a failure, every member
// the policy's answer. It counts the group as one decision, allowed when
// every member is, and returns how many operations got the policy's answer
// and the failure that made it so.
func (s *Store) settleGroup(p *pipe, i int, b *redisscript.Batch) (int, error) {
	n := int(p.refs[i].span)
	var failure error
	all := true
	for j := i; j < i+n && failure == nil; j++ {
		v, err := b.Reply(j)
		r, err := s.outcome(decide.Acquire, v, err)
		failure = err
		all = all && r.Err == nil && r.Decision.Allowed
	}
	if failure != nil {
		if !s.settlePolicy(p, i, failure) {
			return 0, nil
		}
		return n, failure
	}
	if !p.answered[i].CompareAndSwap(0, 1) {
		return 0, nil // the timer answered the group
	}
	s.count(decide.Acquire, decide.Answer{Decision: bucket.Decision{Allowed: all}}, nil)
	for j := i; j < i+n; j++ {
		v, err := b.Reply(j)
		r, _ := s.outcome(decide.Acquire, v, err) // no failure: checked above
		p.refs[j].c.answer(p.refs[j].i, r)
	}
	return 0, nil
}

// settlePolicy answers ref i of p with the policy's answer for the
// failure err, and when it starts a group, the whole group (counted as one
// decision), unless it has been answered already; it reports whether it
// answered.
func (s *Store) settlePolicy(p *pipe, i int, err error) bool {
	r := &p.refs[i]
	if !r.group {
		return s.settle(p, i, s.failResult(r.kind), err)
	}
	if !p.answered[i].CompareAndSwap(0, 1) {
		return false
	}
	s.count(decide.Acquire, s.fail, err)
	for j := i; j < i+int(r.span); j++ {
		p.refs[j].c.answer(p.refs[j].i, s.fail)
	}
	return true
}
