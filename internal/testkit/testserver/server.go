// Package testserver runs bucketd's protocol server (resp.Server) in the
// test's process on 127.0.0.1:0, by default over a shard group on a
// testkit.Clock, and stops it when the test ends. It is part of testkit,
// apart only because it imports resp and shard, whose own tests use
// testkit; for tests only, never linked into the binary.
//
// Start is the common case: shards on a fake clock behind a server. For
// wiring that needs the group before the server (metrics), call NewGroup
// and Serve; for another Limiter (the Redis store), Serve alone.
package testserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/resp"
	"github.com/bucketd/bucketd/internal/shard"
	"github.com/bucketd/bucketd/internal/testkit"
	"github.com/redis/go-redis/v9"
)

// Options adjust what Start builds; the zero value is a 4-shard group and a
// server with resp's defaults.
type Options struct {
	// Shards adjusts the group's Config; Shards, Clock and Base are set
	// already (4 shards, the server's fake clock).
	Shards func(*shard.Config)
	// Server adjusts the server's Config; Limiter is set already (the group).
	Server func(*resp.Config)
}

// Server is a running resp.Server and what it runs on.
type Server struct {
	Addr   string         // host:port it listens on
	Server *resp.Server   // for Stats, SetPolicies and the like
	Group  *shard.Group   // the shards; nil when started by Serve
	Clock  *testkit.Clock // the shards' clock; nil when started by Serve

	served   chan error // Serve's result
	stopOnce sync.Once
	stopErr  error
}

// Start runs a server over a new shard group whose clock is a new
// testkit.Clock, adjusted by o. Both stop when the test ends, the server
// first (as bucketd shuts down).
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	clk := testkit.NewClock()
	g := NewGroup(t, clk, o.Shards)
	cfg := resp.Config{Limiter: g.Limiter()}
	if o.Server != nil {
		o.Server(&cfg)
	}
	s := Serve(t, cfg)
	s.Group, s.Clock = g, clk
	return s
}

// NewGroup starts a 4-shard group on clk, adjusted by adjust (which may be
// nil), and closes it when the test ends.
func NewGroup(t testing.TB, clk *testkit.Clock, adjust func(*shard.Config)) *shard.Group {
	t.Helper()
	cfg := shard.Config{Shards: 4, Clock: clk.Now, Base: clk.Base()}
	if adjust != nil {
		adjust(&cfg)
	}
	g := shard.New(cfg)
	t.Cleanup(g.Close)
	return g
}

// Serve runs a server with cfg on 127.0.0.1:0 until the test ends or
// Shutdown is called.
func Serve(t testing.TB, cfg resp.Config) *Server {
	t.Helper()
	srv, err := resp.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Addr: ln.Addr().String(), Server: srv, served: make(chan error, 1)}
	go func() { s.served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("stopping the test server: %v", err)
		}
	})
	return s
}

// Shutdown stops the server (resp.Server.Shutdown) and returns its error
// joined with Serve's. Later calls return the first call's result; the
// test's cleanup calls it too.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopOnce.Do(func() {
		err := s.Server.Shutdown(ctx)
		select {
		case serveErr := <-s.served:
			err = errors.Join(err, serveErr)
		case <-ctx.Done():
			err = errors.Join(err, fmt.Errorf("testserver: Serve did not return: %w", ctx.Err()))
		}
		s.stopErr = err
	})
	return s.stopErr
}

// Client returns a go-redis client for the server, with retries off (a
// retry would hide a dropped connection) and opts applied; it is closed
// when the test ends.
func (s *Server) Client(t testing.TB, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: s.Addr, MaxRetries: -1}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// Dial opens a raw RESP connection to the server (see testkit.Dial).
func (s *Server) Dial(t testing.TB) *testkit.Conn {
	t.Helper()
	return testkit.Dial(t, s.Addr)
}
