package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Timings of the Sentinels StartSentinel starts: a master that does not
// answer for DownAfter is down, and a failover takes a few seconds.
const (
	// DownAfter is the Sentinels' down-after-milliseconds: long enough
	// that a loaded machine does not fail a live master over, short
	// enough that a test's failover is quick.
	DownAfter = time.Second
	// FailoverTimeout is the Sentinels' failover-timeout: a failover that
	// stalls (a split vote) is tried again after twice this.
	FailoverTimeout = 3 * time.Second
	// MasterName is the name the Sentinels know the master by.
	MasterName = "mymaster"
)

// sentinelReady bounds the wait for the Sentinels to know the replica
// and each other, and failoverWait the wait for a failover.
const (
	sentinelReady = 30 * time.Second
	failoverWait  = 30 * time.Second
)

// Sentinel is a master with one replica, watched by Sentinels, started by
// StartSentinel. Every process listens on 127.0.0.1 only.
type Sentinel struct {
	// Servers are the master at start ([0]) and its replica ([1]). After a
	// failover Master tells which one is the master.
	Servers []*Server
	// Sentinels are the redis-server --sentinel processes.
	Sentinels []*Server
	t         testing.TB
	clients   map[*Server]*redis.SentinelClient // of client
}

// StartSentinel starts a master, a replica of it and n (1 to 3) Sentinels
// that monitor it as MasterName with a quorum of a majority of them,
// DownAfter and FailoverTimeout, and waits until every Sentinel knows the
// replica (with its link to the master up) and the other Sentinels, so
// that a failover can start as soon as the master fails. extraArgs go to
// both data servers (not the Sentinels). The test's cleanup kills them.
func StartSentinel(t testing.TB, n int, extraArgs ...string) *Sentinel {
	t.Helper()
	if n < 1 || n > 3 {
		t.Fatalf("redistest: StartSentinel takes 1 to 3 Sentinels, not %d", n)
	}
	// The master sends the replica its first copy at once, not after the
	// default 5 s wait for more replicas.
	args := append([]string{"--repl-diskless-sync-delay", "0"}, extraArgs...)
	master := Start(t, args...)
	replica := Start(t, append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(master.Port)}, args...)...)
	s := &Sentinel{Servers: []*Server{master, replica}, t: t, clients: map[*Server]*redis.SentinelClient{}}
	ctx, cancel := context.WithTimeout(context.Background(), sentinelReady)
	defer cancel()
	rc := replica.Client()
	s.poll(ctx, "the replica's link to the master to come up", func() (bool, string) {
		info, err := rc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up"), info
	})
	conf := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d\n"+
		"sentinel down-after-milliseconds %[1]s %[4]d\n"+
		"sentinel failover-timeout %[1]s %[5]d\n",
		MasterName, master.Port, n/2+1, DownAfter.Milliseconds(), FailoverTimeout.Milliseconds())
	for range n {
		sn := &Server{t: t, bin: ServerBinary(t), Dir: t.TempDir()}
		sn.conf = filepath.Join(sn.Dir, "sentinel.conf")
		if err := os.WriteFile(sn.conf, []byte(conf), 0o644); err != nil {
			t.Fatalf("redistest: writing %s: %v", sn.conf, err)
		}
		sn.run(nil, false)
		s.Sentinels = append(s.Sentinels, sn)
	}
	s.waitReady(ctx, n)
	return s
}

// waitReady polls every Sentinel until it sees the master up, the replica
// with its link up, and the n-1 other Sentinels.
func (s *Sentinel) waitReady(ctx context.Context, n int) {
	s.t.Helper()
	for _, sn := range s.Sentinels {
		c := s.client(sn)
		s.poll(ctx, "Sentinel "+sn.Addr+" to know the replica and the other Sentinels", func() (bool, string) {
			m, err := c.Master(ctx, MasterName).Result()
			if err != nil {
				return false, err.Error()
			}
			replicas, err := c.Replicas(ctx, MasterName).Result()
			if err != nil {
				return false, err.Error()
			}
			ok := m["flags"] == "master" && m["num-other-sentinels"] == strconv.Itoa(n-1) && len(replicas) == 1 &&
				replicas[0]["flags"] == "slave" && replicas[0]["master-link-status"] == "ok"
			return ok, fmt.Sprintf("master %v, replicas %v", m, replicas)
		})
	}
}

// client returns the Sentinel client of sn, made on first use and closed
// when the test ends.
func (s *Sentinel) client(sn *Server) *redis.SentinelClient {
	if c, ok := s.clients[sn]; ok {
		return c
	}
	c := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr, MaxRetries: -1})
	s.t.Cleanup(func() { _ = c.Close() }) // the process may be gone already
	s.clients[sn] = c
	return c
}

// poll calls check every pollEvery until it says done, or fails the test
// when ctx ends, with what it waited for and check's last words.
func (s *Sentinel) poll(ctx context.Context, what string, check func() (bool, string)) {
	s.t.Helper()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		done, last := check()
		if done {
			return
		}
		select {
		case <-ctx.Done():
			s.t.Fatalf("redistest: waited in vain for %s: %s", what, last)
		case <-tick.C:
		}
	}
}

// Addrs returns the Sentinels' addresses.
func (s *Sentinel) Addrs() []string {
	addrs := make([]string, len(s.Sentinels))
	for i, sn := range s.Sentinels {
		addrs[i] = sn.Addr
	}
	return addrs
}

// URL returns the redis-sentinel:// URL of the Sentinels and the master
// (bucketd's --replicate and --store form), with query appended when not
// empty (for example "db=1").
func (s *Sentinel) URL(query string) string {
	u := "redis-sentinel://" + strings.Join(s.Addrs(), ",") + "/" + MasterName
	if query != "" {
		u += "?" + query
	}
	return u
}

// MasterAddr returns the address the first Sentinel that answers gives
// for the master.
func (s *Sentinel) MasterAddr() string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var errs []string
	for _, sn := range s.Sentinels {
		if !sn.Running() {
			continue
		}
		hp, err := s.client(sn).GetMasterAddrByName(ctx, MasterName).Result()
		if err == nil && len(hp) == 2 {
			return net.JoinHostPort(hp[0], hp[1])
		}
		errs = append(errs, fmt.Sprintf("%s: %v %v", sn.Addr, hp, err))
	}
	s.t.Fatalf("redistest: no Sentinel names the master: %v", errs)
	return ""
}

// Master returns the data server the Sentinels name master now.
func (s *Sentinel) Master() *Server {
	s.t.Helper()
	return s.server(s.MasterAddr())
}

func (s *Sentinel) server(addr string) *Server {
	s.t.Helper()
	for _, srv := range s.Servers {
		if srv.Addr == addr {
			return srv
		}
	}
	s.t.Fatalf("redistest: the Sentinels name %s master, which is none of the servers started", addr)
	return nil
}

// WaitFailover waits until every running Sentinel names a master other
// than old and that server says it is a master (ROLE), and returns it.
// Fail old first (Kill, Pause) or ask for a failover (Failover).
func (s *Sentinel) WaitFailover(old *Server) *Server {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failoverWait)
	defer cancel()
	var next string
	s.poll(ctx, "a failover away from "+old.Addr, func() (bool, string) {
		var named []string
		for _, sn := range s.Sentinels {
			if !sn.Running() {
				continue
			}
			hp, err := s.client(sn).GetMasterAddrByName(ctx, MasterName).Result()
			if err != nil || len(hp) != 2 {
				return false, fmt.Sprintf("%s: %v", sn.Addr, err)
			}
			named = append(named, net.JoinHostPort(hp[0], hp[1]))
		}
		for _, a := range named {
			if a == old.Addr || a != named[0] {
				return false, fmt.Sprintf("the Sentinels name %v", named)
			}
		}
		next = named[0]
		role, err := s.role(ctx, next)
		return err == nil && role == "master", fmt.Sprintf("%s: ROLE %v %v", next, role, err)
	})
	return s.server(next)
}

// role asks the data server at addr for its ROLE (master or slave).
func (s *Sentinel) role(ctx context.Context, addr string) (string, error) {
	c := redis.NewClient(&redis.Options{Addr: s.server(addr).Addr, MaxRetries: -1})
	defer c.Close() //nolint:errcheck // a one-off client; closing it changes nothing
	r, err := c.Do(ctx, "ROLE").Slice()
	if err != nil {
		return "", err
	}
	if len(r) == 0 {
		return "", fmt.Errorf("ROLE answered %v", r)
	}
	role, _ := r[0].(string)
	return role, nil
}

// Failover asks the first Sentinel for a failover (SENTINEL FAILOVER),
// which demotes the master without the wait for it to be seen down.
func (s *Sentinel) Failover() {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.client(s.Sentinels[0]).Failover(ctx, MasterName).Err(); err != nil {
		s.t.Fatalf("redistest: SENTINEL FAILOVER: %v", err)
	}
}
