// Package testserver runs bucketd's protocol front (the command layer,
// internal/resp/command, behind the connection server, resp.Server) in the
// test's process on 127.0.0.1:0, by default over a shard group on a
// testkit.Clock, and stops it when the test ends. It is part of testkit,
// apart only because it imports resp and shard, whose own tests use
// testkit; for tests only, never linked into the binary.
//
// Start is the common case: shards on a fake clock behind the front. For
// wiring that needs the group before the front (metrics), call NewGroup
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
	"github.com/bucketd/bucketd/internal/resp/command"
	"github.com/bucketd/bucketd/internal/shard"
	"github.com/bucketd/bucketd/internal/testkit"
	"github.com/redis/go-redis/v9"
)

// Options adjust what Start builds; the zero value is a 4-shard group and a
// front with the defaults.
type Options struct {
	// Shards adjusts the group's Config; Shards, Clock and Base are set
	// already (4 shards, the server's fake clock).
	Shards func(*shard.Config)
	// Commands adjusts the command layer's Config; Limiter is set already
	// (the group).
	Commands func(*command.Config)
	// Server adjusts the connection server's Config; Handler is set
	// already (the command layer).
	Server func(*resp.Config)
}

// Server is a running protocol front and what it runs on.
type Server struct {
	Addr     string          // host:port it listens on
	Server   *resp.Server    // the connections: Stats (connection counts)
	Commands *command.Engine // the commands: Stats, SetPolicies
	Group    *shard.Group    // the shards; nil when started by Serve
	Clock    *testkit.Clock  // the shards' clock; nil when started by Serve

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
	cmds := command.Config{Limiter: g.Limiter()}
	if o.Commands != nil {
		o.Commands(&cmds)
	}
	var srv resp.Config
	if o.Server != nil {
		o.Server(&srv)
	}
	s := Serve(t, cmds, srv)
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

// Serve runs the front (cmds behind a server with srv; its Handler is
// set here) on 127.0.0.1:0 until the test ends or Shutdown is called.
func Serve(t testing.TB, cmds command.Config, srv resp.Config) *Server {
	t.Helper()
	e, err := command.New(cmds)
	if err != nil {
		t.Fatal(err)
	}
	srv.Handler = e
	server, err := resp.NewServer(srv)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Addr: ln.Addr().String(), Server: server, Commands: e, served: make(chan error, 1)}
	go func() { s.served <- server.Serve(ln) }()
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
