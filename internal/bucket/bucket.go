package bucket

import "math"

// MaxValue is the largest capacity, rate and cost a call may give (1e15):
// it keeps every figure well inside float64's exact integers and every
// reply's milliseconds inside int64. What loads buckets from outside (a
// snapshot, the Redis copy) holds them to it as the commands do.
const MaxValue = 1e15

// Limit is the shape of a bucket as one call gives it: at most Capacity
// tokens, refilled continuously at Rate tokens per second. Callers validate
// both as finite, > 0 and <= MaxValue; Limit does no checking of its own.
type Limit struct {
	Capacity float64
	Rate     float64 // tokens per second
}

// State is what bucketd remembers about one bucket: the tokens it held right
// after the last call that spent tokens, and that call's time. The zero value
// is an empty bucket at time 0; a bucket nobody has used yet is full, so
// callers that have no stored state pass exists=false instead of a zero State.
// State holds no pointers, so a map of them costs the garbage collector nothing.
type State struct {
	Tokens float64
	Last   int64 // microseconds, on the caller's clock
}

// Decision is the answer to one acquire or peek, the four numbers of
// TB.ACQUIRE ... WITHINFO. Every integer saturates at math.MaxInt64.
type Decision struct {
	Allowed      bool
	Remaining    int64 // whole tokens left after the call (floor)
	RetryAfterMs int64 // 0 when allowed; -1 when the cost exceeds capacity
	ResetAfterMs int64 // until the bucket is full again; 0 when full
}

const microsPerSecond = 1e6

// TokensAt returns the tokens the bucket holds at now under limit l, without
// changing anything: the stored tokens plus the refill since Last, clamped to
// l.Capacity. A now before Last counts as no time at all.
//
// The expression is written as the Lua script writes it,
// min(capacity, tokens + (elapsed / 1e6) * rate), and the explicit
// float64 conversion stops the compiler from fusing the multiply and add, so
// Go and Lua round identically.
func (s State) TokensAt(l Limit, now int64) float64 {
	elapsed := now - s.Last
	if elapsed <= 0 {
		return math.Min(l.Capacity, s.Tokens)
	}
	refill := float64(float64(elapsed) / microsPerSecond * l.Rate)
	return math.Min(l.Capacity, s.Tokens+refill)
}

// Acquire spends cost tokens from the bucket if it holds that many at now.
// exists=false means the bucket has no stored state and is therefore full.
//
// It returns the state to store and the decision. A cost of 0 is a peek: it
// always succeeds and the returned state is s unchanged (callers store nothing
// and create nothing). For cost > 0 the returned state is refilled, clamped to
// l.Capacity and stamped with max(now, s.Last), whether or not the call was
// allowed, exactly as the classic script rewrites the hash on every call.
// A state that comes back full (see IsFull) carries no information and need
// not be stored.
func Acquire(s State, exists bool, l Limit, cost float64, now int64) (State, Decision) {
	if cost == 0 {
		return s, Peek(s, exists, l, 0, now)
	}
	if !exists {
		s = State{Tokens: l.Capacity, Last: now}
	}
	tokens := s.TokensAt(l, now)
	allowed := tokens >= cost
	if allowed {
		tokens -= cost
	}
	last := s.Last
	if now > last {
		last = now
	}
	return State{Tokens: tokens, Last: last}, decide(l, cost, tokens, allowed)
}

// Peek answers what Acquire with this cost would answer at now, changing
// nothing. Remaining is what would be left after that take. A capacity
// smaller than the stored tokens lowers the answer but not the stored state.
func Peek(s State, exists bool, l Limit, cost float64, now int64) Decision {
	tokens := l.Capacity
	if exists {
		tokens = s.TokensAt(l, now)
	}
	allowed := tokens >= cost
	if allowed {
		tokens -= cost
	}
	return decide(l, cost, tokens, allowed)
}

// Check answers whether the bucket alone holds cost tokens at now, taking
// nothing: Remaining is what it holds now, and a bucket that holds the
// tokens gets retry 0. It is TB.MACQUIRE's answer for each bucket of a
// group that is denied as a whole (no bucket gives anything then).
func Check(s State, exists bool, l Limit, cost float64, now int64) Decision {
	tokens := l.Capacity
	if exists {
		tokens = s.TokensAt(l, now)
	}
	return decide(l, cost, tokens, tokens >= cost)
}

// decide builds the four WITHINFO numbers from the tokens left after the
// call (after the take, when allowed).
func decide(l Limit, cost, tokensAfter float64, allowed bool) Decision {
	d := Decision{
		Allowed:      allowed,
		Remaining:    saturate(math.Floor(tokensAfter)),
		ResetAfterMs: ceilMillis(l.Capacity-tokensAfter, l.Rate),
	}
	switch {
	case allowed:
		d.RetryAfterMs = 0
	case cost > l.Capacity:
		d.RetryAfterMs = -1
	default:
		d.RetryAfterMs = ceilMillis(cost-tokensAfter, l.Rate)
	}
	return d
}

// IsFull reports whether s, refilled to now under l, holds l.Capacity
// tokens. A full bucket is indistinguishable from one that was never used
// with the same limit, which is why it may be deleted.
func (s State) IsFull(l Limit, now int64) bool {
	return s.TokensAt(l, now) >= l.Capacity
}

// ceilMillis returns amount / rate seconds in milliseconds, rounded up, 0
// for an amount <= 0, saturating at math.MaxInt64.
//
// A result within min(1e-9 relative, 1e-6 ms) of a whole number is taken as
// that number: 6.1 tokens need (10-6.1)/1 s = 3900.0000000000005 ms in
// float64, and a reply of 3901 would only show the rounding noise of the
// subtraction. The absolute cap keeps the answer from ever being more than a
// nanosecond early, however long the wait.
func ceilMillis(amount, rate float64) int64 {
	if amount <= 0 {
		return 0
	}
	ms := amount / rate * 1000
	if r := math.Round(ms); math.Abs(ms-r) <= math.Min(ms*1e-9, 1e-6) {
		return saturate(r)
	}
	return saturate(math.Ceil(ms))
}

// saturate converts f to int64, clamping values beyond the int64 range (and
// NaN, which validated input never produces) to math.MaxInt64 instead of
// letting the conversion wrap. Negative inputs do not occur here.
func saturate(f float64) int64 {
	if !(f < 0x1p63) {
		return math.MaxInt64
	}
	return int64(f)
}
