package replica

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/redisscript"
)

// Fence makes sure a pipeline abandoned on a timeout never runs after
// anything newer. Such a pipeline may still be in Redis's socket buffer (a
// paused Redis runs it when it resumes) or on the network; if it ran after
// the key's deletion had been written, its put would bring the key back,
// and the newer-wins guard cannot stop it (a deleted key has no ts).
//
// The Fence names every connection of the replicator's client (install
// OnConnect as the client's redis.Options.OnConnect). After a failed write
// it kills, before anything else is written, every connection with that
// name except the one it speaks on (CLIENT LIST, CLIENT KILL ID). Redis runs
// commands in order on that connection, so once the kills have run, an
// abandoned connection's commands have either run already or never will.
// Where CLIENT is not allowed (some managed services rename or forbid it)
// the Fence says so and the replicator falls back to reconciling after
// failures.
type Fence struct {
	once        sync.Once
	name        string // CLIENT SETNAME of every connection of the client
	mu          sync.Mutex
	pending     bool  // a write failed: kill the other connections first
	unsupported error // why CLIENT cannot be used
}

func (f *Fence) clientName() string {
	f.once.Do(func() {
		b := make([]byte, 8)
		_, _ = rand.Read(b) // crypto/rand does not fail on supported platforms
		f.name = "bucketd-replica-" + hex.EncodeToString(b)
	})
	return f.name
}

// OnConnect names the new connection. A Redis that refuses CLIENT SETNAME
// turns fencing off but keeps the connection; a connection that cannot
// answer at all is refused, and go-redis discards it.
func (f *Fence) OnConnect(ctx context.Context, cn *redis.Conn) error {
	err := cn.ClientSetName(ctx, f.clientName()).Err()
	switch {
	case err == nil:
		return nil
	case redisscript.IsReply(err):
		f.mu.Lock()
		f.unsupported = fmt.Errorf("CLIENT SETNAME: %w", err)
		f.mu.Unlock()
		return nil
	default:
		return err
	}
}

// abandon notes that a write failed on a broken or timed-out connection.
func (f *Fence) abandon() {
	f.mu.Lock()
	f.pending = true
	f.mu.Unlock()
}

// settle kills the client's other connections after a failed write. It
// reports whether Redis is fenced (nothing abandoned can run any more):
// false when fencing is unsupported. An error means Redis did not answer;
// the kills are tried again next time.
func (f *Fence) settle(ctx context.Context, c redis.UniversalClient) (bool, error) {
	f.mu.Lock()
	pending, unsupported := f.pending, f.unsupported
	f.mu.Unlock()
	if unsupported != nil {
		return false, nil
	}
	if !pending {
		return true, nil
	}
	// One pipeline, so one connection: its own ID and the list.
	var self *redis.IntCmd
	var list *redis.StringCmd
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		self, list = p.ClientID(ctx), p.ClientList(ctx)
		return nil
	})
	if err == nil {
		err = f.killOthers(ctx, c, self.Val(), list.Val())
	}
	switch {
	case err == nil:
		f.mu.Lock()
		f.pending = false
		f.mu.Unlock()
		return true, nil
	case redisscript.IsReply(err):
		f.mu.Lock()
		f.unsupported = fmt.Errorf("CLIENT: %w", err)
		f.mu.Unlock()
		return false, nil
	default:
		return false, err
	}
}

// killOthers kills every client named f.name in list except self.
func (f *Fence) killOthers(ctx context.Context, c redis.UniversalClient, self int64, list string) error {
	for _, line := range strings.Split(list, "\n") {
		var id int64 = -1
		named := false
		for _, field := range strings.Fields(line) {
			k, v, _ := strings.Cut(field, "=")
			switch k {
			case "id":
				id, _ = strconv.ParseInt(v, 10, 64)
			case "name":
				named = v == f.clientName()
			}
		}
		if !named || id < 0 || id == self {
			continue
		}
		// The filter form does not fail when the connection closed
		// meanwhile (after running all it had read), which fences it just
		// as well; it answers 0 killed then.
		if err := c.ClientKillByFilter(ctx, "ID", strconv.FormatInt(id, 10)).Err(); err != nil {
			return err
		}
	}
	return nil
}
