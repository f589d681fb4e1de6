package redisscript

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/bucket"
)

// ErrBadReply is returned (wrapped) for a reply that is not what the
// script or DEL sends.
var ErrBadReply = errors.New("redisscript: unexpected reply")

// Reply returns the reply to call i of the last Build once its command has
// run: the command's own reply or error, or for a call that shared a
// command with others its element of the command's array reply, which is
// an error for that call alone when the script refused it.
func (b *Batch) Reply(i int) (any, error) {
	c := &b.calls[i]
	cmd := b.cmds[c.cmd]
	v, err := cmd.Val(), cmd.Err()
	if err != nil || c.elem < 0 {
		return v, err
	}
	a, ok := v.([]any)
	if !ok || int(c.elem) >= len(a) {
		return nil, fmt.Errorf("%w: want an array with element %d, got %T", ErrBadReply, c.elem+1, v)
	}
	v = a[c.elem]
	if err, isErr := v.(error); isErr {
		return nil, err
	}
	return v, nil
}

// ParseDecision reads the script's reply to acquire or peek, as go-redis
// hands it over: four elements, each an integer (int64, or int as some
// clients give) or a decimal string. The script sends a saturated field as
// the string "9223372036854775807" because a Lua number cannot carry
// 2^63-1; ParseDecision returns it as math.MaxInt64.
func ParseDecision(v any) (bucket.Decision, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 4 {
		return bucket.Decision{}, fmt.Errorf("%w: want an array of 4 elements, got %T", ErrBadReply, v)
	}
	var n [4]int64
	for i, e := range a {
		switch x := e.(type) {
		case int64:
			n[i] = x
		case int:
			n[i] = int64(x)
		case string:
			p, err := strconv.ParseInt(x, 10, 64)
			if err != nil {
				return bucket.Decision{}, fmt.Errorf("%w: element %d: %w", ErrBadReply, i+1, err)
			}
			n[i] = p
		default:
			return bucket.Decision{}, fmt.Errorf("%w: element %d is a %T", ErrBadReply, i+1, e)
		}
	}
	if n[0] != 0 && n[0] != 1 {
		return bucket.Decision{}, fmt.Errorf("%w: allowed is %d", ErrBadReply, n[0])
	}
	return bucket.Decision{Allowed: n[0] == 1, Remaining: n[1], RetryAfterMs: n[2], ResetAfterMs: n[3]}, nil
}

// ParseLease reads the script's reply to a lease call: the four numbers
// of ParseDecision, the record's epoch (an integer) and its held (the
// string "%.17g" of the float64).
func ParseLease(v any) (bucket.LeaseReply, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 6 {
		return bucket.LeaseReply{}, fmt.Errorf("%w: want an array of 6 elements, got %T", ErrBadReply, v)
	}
	d, err := ParseDecision(a[:4])
	if err != nil {
		return bucket.LeaseReply{}, err
	}
	epoch, ok := a[4].(int64)
	if !ok {
		return bucket.LeaseReply{}, fmt.Errorf("%w: epoch is a %T", ErrBadReply, a[4])
	}
	s, _ := a[5].(string)
	held, err := strconv.ParseFloat(s, 64)
	if err != nil || held < 0 {
		return bucket.LeaseReply{}, fmt.Errorf("%w: held %v", ErrBadReply, a[5])
	}
	return bucket.LeaseReply{Decision: d, Epoch: epoch, Held: held}, nil
}

// Class is what an error from a script command (or one element of a
// batch's reply) means to the caller.
type Class uint8

const (
	// None: no error.
	None Class = iota
	// NoScript: Redis does not have the script and ran nothing; Send
	// handles it by sending the script (EVAL).
	NoScript
	// WrongType: the key holds another type than the script's hash. An
	// answer about that key, not a failure of Redis.
	WrongType
	// Invalid: the script refused an argument ("ERR invalid …"). Sending
	// the call again cannot help; it would be a bucketd bug.
	Invalid
	// OOM: Redis is at its maxmemory and refused a write that needs
	// memory ("OOM command not allowed …", under the noeviction policy or
	// when nothing is left to evict). The script ran none of its writes: it
	// is refused at its first one. Redis never refuses a DEL this way, so a
	// script call that only deletes still runs; sending a put again helps
	// once Redis has room.
	OOM
	// Reply: any other error reply (READONLY, MISCONF, a script error).
	Reply
	// Redirect: MOVED or ASK from a Redis Cluster master: the key's slot is
	// served by another node (or is moving there), and this one ran
	// nothing. SendNode sends such commands again through the cluster
	// client, which follows the redirection.
	Redirect
	// Transport: no reply at all: a timeout, a broken connection, the
	// context ending. Redis may or may not have run the command.
	Transport
)

// Classify says what err means; nil is None. It allocates only for an
// error (errors.As needs the address of a variable), never for nil, which
// is what every call of a healthy Redis passes.
func Classify(err error) Class {
	if err == nil {
		return None
	}
	var re redis.Error
	switch {
	case !errors.As(err, &re):
		return Transport
	case redis.HasErrorPrefix(re, "NOSCRIPT"):
		return NoScript
	case redis.HasErrorPrefix(re, "WRONGTYPE"):
		return WrongType
	case isRedirect(err):
		return Redirect
	case strings.HasPrefix(re.Error(), "ERR invalid "):
		return Invalid
	case redis.HasErrorPrefix(re, "OOM") || strings.Contains(re.Error(), ": -OOM "):
		// Redis 7 passes a script's error on with its code; Redis 6 wraps
		// it: "ERR Error running script (…): @user_script:180: -OOM …".
		return OOM
	}
	return Reply
}

// isRedirect reports whether err is MOVED or ASK, as go-redis's cluster
// client reads them (and so follows them).
func isRedirect(err error) bool {
	if _, moved := redis.IsMovedError(err); moved {
		return true
	}
	_, ask := redis.IsAskError(err)
	return ask
}

// IsReply reports whether err is an error reply from Redis, as opposed to
// no reply (a timeout or a broken connection).
func IsReply(err error) bool {
	c := Classify(err)
	return c != None && c != Transport
}

// Load loads the script into Redis (SCRIPT LOAD; on a cluster, on every
// master). Not required, since Send loads it where Redis answers
// NOSCRIPT, but it opens connections and learns a cluster's slots ahead
// of the first calls. Bound ctx: a Redis that is down makes it fail.
func Load(ctx context.Context, client redis.UniversalClient) error {
	sha, err := client.ScriptLoad(ctx, bucket.Script).Result()
	if err != nil {
		return fmt.Errorf("SCRIPT LOAD: %w", err)
	}
	if sha != bucket.ScriptSHA1 {
		return fmt.Errorf("SCRIPT LOAD answered %q, want %s", sha, bucket.ScriptSHA1)
	}
	return nil
}
