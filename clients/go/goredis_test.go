package clients

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// goRedis runs steps with a go-redis client: Do for a command, TxPipelined
// (MULTI ... EXEC) for a transaction.
type goRedis struct{ c *redis.Client }

func (r goRedis) cmd(ctx context.Context, args []string) any {
	return fromGoRedis(r.c.Do(ctx, anyArgs(args)...).Result())
}

func (r goRedis) tx(ctx context.Context, cmds [][]string) any {
	var queued []*redis.Cmd
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, args := range cmds {
			queued = append(queued, p.Do(ctx, anyArgs(args)...))
		}
		return nil
	})
	// TxPipelined returns the first error. An error of a command inside
	// EXEC's array is that command's own; any other (EXECABORT, a failed
	// MULTI, a broken connection) is the transaction's.
	if err != nil && (strings.HasPrefix(err.Error(), "EXECABORT") || !isCommandError(err, queued)) {
		return errReply(err.Error())
	}
	out := make([]any, len(queued))
	for i, c := range queued {
		out[i] = fromGoRedis(c.Result())
	}
	return out
}

// isCommandError says whether err is the error of one of the commands.
func isCommandError(err error, cmds []*redis.Cmd) bool {
	for _, c := range cmds {
		if c.Err() != nil && c.Err().Error() == err.Error() {
			return true
		}
	}
	return false
}

func anyArgs(args []string) []any {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = a
	}
	return out
}

// fromGoRedis turns a go-redis reply into the form check takes.
func fromGoRedis(v any, err error) any {
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		return errReply(err.Error())
	}
	switch x := v.(type) {
	case error: // an error element of an array
		return errReply(x.Error())
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = fromGoRedis(x[i], nil)
		}
		return out
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[fmt.Sprint(k)] = fromGoRedis(e, nil)
		}
		return out
	}
	return v
}

// newGoRedis is go-redis as its README creates it: NewClient with the
// address (and the password, if any) and nothing else, so HELLO 3 and the
// rest of its default handshake.
func newGoRedis(t *testing.T, addr, password string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, Password: password})
	t.Cleanup(func() { c.Close() })
	return c
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestGoRedis(t *testing.T) {
	s := startBucketd(t)
	sc := newScenario("goredis", 3)
	sc.check(t, "go-redis", runSteps(testContext(t), goRedis{newGoRedis(t, s.addr, "")}, sc.steps()))
}

// With --requirepass, go-redis sends HELLO 3 AUTH default <password>.
func TestGoRedisPassword(t *testing.T) {
	s := startBucketd(t, "--requirepass", "s3cret")
	sc := newScenario("goredis-pw", 3)
	sc.check(t, "go-redis", runSteps(testContext(t), goRedis{newGoRedis(t, s.addr, "s3cret")}, sc.steps()))

	wrong := newGoRedis(t, s.addr, "wrong")
	if err := wrong.Ping(testContext(t)).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("go-redis with a wrong password: PING error %v, want WRONGPASS", err)
	}
}

// A password against a bucketd without one: HELLO 3 AUTH default <anything>
// succeeds, as with Redis's default user (go-redis would otherwise fall back
// to AUTH <password>, which fails).
func TestGoRedisPasswordWithoutRequirepass(t *testing.T) {
	s := startBucketd(t)
	sc := newScenario("goredis-pw", 3)
	sc.check(t, "go-redis", runSteps(testContext(t), goRedis{newGoRedis(t, s.addr, "any")}, sc.steps()))
}
