package clients

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// ruei runs steps with a rueidis client: Do for a command, DoMulti of
// MULTI, the commands and EXEC for a transaction.
type ruei struct{ c rueidis.Client }

func (r ruei) command(args []string) rueidis.Completed {
	return r.c.B().Arbitrary(args...).Build()
}

func (r ruei) cmd(ctx context.Context, args []string) any {
	return fromRueidis(r.c.Do(ctx, r.command(args)).ToAny())
}

func (r ruei) tx(ctx context.Context, cmds [][]string) any {
	multi := []rueidis.Completed{r.c.B().Multi().Build()}
	for _, args := range cmds {
		multi = append(multi, r.command(args))
	}
	multi = append(multi, r.c.B().Exec().Build())
	res := r.c.DoMulti(ctx, multi...)
	return fromRueidis(res[len(res)-1].ToAny())
}

// fromRueidis turns a rueidis reply into the form check takes.
func fromRueidis(v any, err error) any {
	if rueidis.IsRedisNil(err) {
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
			out[i] = fromRueidis(x[i], nil)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = fromRueidis(e, nil)
		}
		return out
	}
	return v
}

// newRueidis is rueidis as its README creates it: NewClient with the
// address (and the password, if any) only. So HELLO 3 and CLIENT TRACKING
// ON OPTIN (its client-side cache is on by default), and CLUSTER SLOTS to
// find out it is not a cluster.
func newRueidis(t *testing.T, addr, password string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, Password: password})
	if err != nil {
		t.Fatalf("rueidis.NewClient with default options: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestRueidis(t *testing.T) {
	s := startBucketd(t)
	sc := newScenario("rueidis", 3)
	sc.check(t, "rueidis", runSteps(testContext(t), ruei{newRueidis(t, s.addr, "")}, sc.steps()))
}

func TestRueidisPassword(t *testing.T) {
	s := startBucketd(t, "--requirepass", "s3cret")
	sc := newScenario("rueidis-pw", 3)
	sc.check(t, "rueidis", runSteps(testContext(t), ruei{newRueidis(t, s.addr, "s3cret")}, sc.steps()))
}

// DoCache of a bucket command never serves a stale reply. rueidis sends
// CLIENT CACHING YES, MULTI, PTTL key, the command, EXEC, and would cache
// the command's reply; bucketd refuses a bucket command the client asked
// to cache (its reply is stale at once), so the transaction aborts,
// nothing runs and nothing is cached: rueidis returns bucketd's error (or
// ErrDoCacheAborted). Should a DoCache ever be answered, its reply must be
// fresh: three calls on a draining bucket never give the same answer
// twice, and the bucket holds exactly the tokens the answered calls took.
func TestRueidisDoCacheNeverStale(t *testing.T) {
	s := startBucketd(t)
	c := newRueidis(t, s.addr, "")
	ctx := testContext(t)
	spent := int64(0)
	for i := range 3 {
		cmd := rueidis.Cacheable(c.B().Arbitrary("TB.ACQUIRE").Keys("cached").Args("10", "0.001", "1", "WITHINFO").Build())
		res := c.DoCache(ctx, cmd, time.Minute)
		v, err := res.ToAny()
		if errors.Is(err, rueidis.ErrDoCacheAborted) || err != nil && strings.Contains(err.Error(), "must not be cached") {
			continue
		}
		if err != nil {
			t.Fatalf("DoCache %d: %v", i, err)
		}
		if res.IsCacheHit() {
			t.Fatalf("DoCache %d: served from the client's cache: %v", i, v)
		}
		spent++
		want := []any{int64(1), 10 - spent, int64(0), about(spent * 1_000_000)}
		if problem := match(fromRueidis(v, nil), want); problem != "" {
			t.Fatalf("DoCache %d: %v: %s (a stale reply?)", i, v, problem)
		}
	}
	got := fromRueidis(c.Do(ctx, c.B().Arbitrary("TB.PEEK").Keys("cached").Args("10", "0.001", "0").Build()).ToAny())
	if problem := match(got, []any{int64(1), 10 - spent, int64(0), about(spent * 1_000_000)}); problem != "" {
		t.Fatalf("after %d answered DoCache calls, TB.PEEK = %v: %s", spent, show(got), problem)
	}
	t.Logf("%d of 3 DoCache calls answered (the others refused: a bucket reply must not be cached)", spent)
}
