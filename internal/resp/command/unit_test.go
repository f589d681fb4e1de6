package command_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/resp"
	"github.com/bucketd/bucketd/internal/resp/command"
	"github.com/bucketd/bucketd/internal/testkit"
	"github.com/bucketd/bucketd/internal/testkit/testserver"
)

// runLog is a decide.Limiter in front of another that records how many
// requests each Run carried.
type runLog struct {
	decide.Limiter
	mu   sync.Mutex
	runs []int
}

func (l *runLog) NewCaller() decide.Caller {
	return &loggedCaller{Caller: l.Limiter.NewCaller(), log: l}
}

func (l *runLog) sizes() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int(nil), l.runs...)
}

type loggedCaller struct {
	decide.Caller
	log   *runLog
	added int
}

func (c *loggedCaller) Add(r decide.Request) { c.added++; c.Caller.Add(r) }
func (c *loggedCaller) Run() ([]decide.Answer, error) {
	c.log.mu.Lock()
	c.log.runs = append(c.log.runs, c.added)
	c.log.mu.Unlock()
	c.added = 0
	return c.Caller.Run()
}

// padding is one command of exactly n bytes (n >= 22): an ECHO, whose
// reply is left for the caller to read.
func padding(n int) string {
	for body := n - 20; body > 0; body-- {
		if cmd := testkit.Command("ECHO", strings.Repeat("x", body)); len(cmd) == n {
			return cmd
		}
	}
	panic("no ECHO of that size")
}

const peek = "*5\r\n$7\r\nTB.PEEK\r\n$1\r\nk\r\n$4\r\n1e12\r\n$3\r\n1e6\r\n$1\r\n0\r\n"

// TestPipelineInOneWriteIsOneRun: the commands of a pipeline sent in one
// write are planned together and answered by one Run of the store, one
// unit, wherever the connection's buffer stood. (redcon's reader rewound
// its 4 KiB buffer only when it had grown: after a 3,696-byte command, a
// write of 16 TB.PEEKs was read into the last 400 bytes and answered in
// two Runs of 5 and 11, with other clients' work between them.)
func TestPipelineInOneWriteIsOneRun(t *testing.T) {
	for _, before := range []int{0, 4096 - 400, 4096 - 57, 4096, 9000, 70_000} {
		t.Run(fmt.Sprint(before, " bytes before"), func(t *testing.T) {
			group := testserver.NewGroup(t, testkit.NewClock(), nil)
			log := &runLog{Limiter: group.Limiter()}
			ts := testserver.Serve(t, command.Config{Limiter: log}, resp.Config{})
			c := ts.Dial(t)
			if before > 0 {
				c.Send(t, padding(before))
				c.Reply(t)
			}
			c.Send(t, strings.Repeat(peek, 16))
			for range 16 {
				c.Reply(t)
			}
			c.Send(t, strings.Repeat(peek, 400)) // 22,800 bytes in one write
			for range 400 {
				c.Reply(t)
			}
			if got := log.sizes(); len(got) != 2 || got[0] != 16 || got[1] != 400 {
				t.Fatalf("writes of 16 and of 400 TB.PEEKs were answered by Runs of %v, want [16 400]", got)
			}
		})
	}
}

// TestPipelineNeverSeesATransactionHalfDone: writers only ever take from
// 16 buckets together, in MULTI/EXEC; readers send 16 TB.PEEKs in one
// write, behind a padding command that leaves their connection's buffer
// nearly full. Every read must see the 16 buckets at one count, as in
// Redis, where a pipeline read at once sees a transaction whole or not
// at all.
func TestPipelineNeverSeesATransactionHalfDone(t *testing.T) {
	ts := startServer(t, nil)
	keys := make([]string, 16)
	for i := range keys {
		keys[i] = fmt.Sprint("{k", i, "}")
	}
	var reads strings.Builder
	for _, k := range keys {
		reads.WriteString(testkit.Command("TB.PEEK", k, "1e12", "1e6", "0"))
	}
	const writers, readers, rounds = 8, 4, 150
	var wg sync.WaitGroup
	var torn, seen atomic.Int64
	for range writers {
		wg.Go(func() {
			c := ts.Client(t)
			for range rounds {
				_, err := c.TxPipelined(context.Background(), func(p redis.Pipeliner) error {
					for _, k := range keys {
						p.Do(context.Background(), "TB.ACQUIRE", k, "1e12", "1e6", "1")
					}
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for r := range readers {
		wg.Go(func() {
			c := ts.Dial(t)
			for i := range rounds {
				c.Send(t, padding(4096-400-13*((r+i)%8)))
				c.Reply(t)
				c.Send(t, reads.String())
				first := ""
				for k := range keys {
					got := c.Reply(t)
					if k == 0 {
						first = got
					} else if got != first {
						torn.Add(1)
						break
					}
				}
				seen.Add(1)
			}
		})
	}
	wg.Wait()
	if n := torn.Load(); n != 0 {
		t.Fatalf("%d of %d pipelines of 16 TB.PEEKs saw a transaction half done", n, seen.Load())
	}
}
