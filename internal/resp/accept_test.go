package resp_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/resp"
	"github.com/bucketd/bucketd/internal/resp/command"
	"github.com/bucketd/bucketd/internal/testcert"
	"github.com/bucketd/bucketd/internal/testkit"
	"github.com/bucketd/bucketd/internal/testkit/testserver"
)

// promptly bounds how long a client waits for the server in the tests
// below: far longer than a handshake and a PING take on loopback, far
// shorter than the handshake timeout (10 s by default) that ends a silent
// socket. A client stuck behind a silent socket waits for ever, so any
// bound shows it.
const promptly = 3 * time.Second

// tlsPair is a server certificate and the client side that trusts it.
type tlsPair struct {
	server *tls.Config
	client *tls.Config
}

func newTLSPair(t *testing.T) tlsPair {
	t.Helper()
	cert, ca := testcert.New(t, "bucketd")
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return tlsPair{
		server: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		client: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12},
	}
}

// lineConn is a client connection, TLS or plain, that reads replies line
// by line; every read and write must finish within promptly.
type lineConn struct {
	net.Conn
	r *bufio.Reader
}

// dialTLS connects with TLS and completes the handshake, within promptly.
func dialTLS(t *testing.T, addr string, cfg *tls.Config) (*lineConn, error) {
	t.Helper()
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: promptly}, Config: cfg}
	ctx, cancel := context.WithTimeout(context.Background(), promptly)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(promptly)) //nolint:errcheck // a fresh conn
	return &lineConn{Conn: c, r: bufio.NewReader(c)}, nil
}

// dialPlain connects without TLS.
func dialPlain(t *testing.T, addr string) *lineConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, promptly)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(promptly)) //nolint:errcheck // a fresh conn
	return &lineConn{Conn: c, r: bufio.NewReader(c)}
}

// ping sends PING and returns the reply line, or the error that ended it.
func (c *lineConn) ping() (string, error) {
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return "", err
	}
	return c.r.ReadString('\n')
}

// silent opens a plain socket that never sends a byte, the client the
// issue describes, and waits until the server has refused or admitted it
// (what counted says).
func silent(t *testing.T, ts *testserver.Server, counted func(resp.Stats) bool) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", ts.Addr, promptly)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	testkit.Eventually(t, promptly, "the server took the silent socket", func() bool { return counted(ts.Server.Stats()) })
	return c
}

// TestTLSRefusalOfASilentSocketBlocksNoAccept is issue 10 item 4: with
// --max-clients 2 and TLS, a third, plain socket that sends nothing is
// refused; writing the refusal runs a TLS handshake, which waits for the
// silent client. It must wait on a goroutine of its own: once the first
// two leave, new TLS clients connect and are answered while the silent
// socket is still open.
func TestTLSRefusalOfASilentSocketBlocksNoAccept(t *testing.T) {
	pair := newTLSPair(t)
	ts := startServer(t, func(cfg *resp.Config) {
		cfg.TLS = pair.server
		cfg.MaxClients = 2
	})
	var first []*lineConn
	for range 2 {
		c, err := dialTLS(t, ts.Addr, pair.client)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := c.ping(); got != "+PONG\r\n" {
			t.Fatalf("TLS client: %q, %v", got, err)
		}
		first = append(first, c)
	}
	silent(t, ts, func(st resp.Stats) bool { return st.RejectedConnections == 1 })
	for _, c := range first {
		c.Close()
	}
	testkit.Eventually(t, promptly, "the two TLS clients gone", func() bool { return ts.Server.Stats().ConnectedClients == 0 })
	for i := range 3 {
		c, err := dialTLS(t, ts.Addr, pair.client)
		if err != nil {
			t.Fatalf("TLS client %d after the first two left, silent socket open: %v", i, err)
		}
		if got, err := c.ping(); got != "+PONG\r\n" {
			t.Fatalf("TLS client %d after the first two left, silent socket open: %q, %v", i, got, err)
		}
		c.Close()
		// The next client may come once the server has seen this one go:
		// with --max-clients 2, two that have not yet been seen to go fill it.
		testkit.Eventually(t, promptly, "the TLS client gone", func() bool { return ts.Server.Stats().ConnectedClients == 0 })
	}
}

// remoteListener makes every connection look as if it came from
// 192.0.2.7 (TEST-NET-1), so that protected mode refuses it: the test
// cannot reach the server from beyond loopback.
type remoteListener struct{ net.Listener }

func (l remoteListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return remoteConn{c}, nil
}

type remoteConn struct{ net.Conn }

func (remoteConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 40000}
}

// serveRemote runs a server whose clients all look non-loopback.
func serveRemote(t *testing.T, cfg resp.Config) *testserver.Server {
	t.Helper()
	cmds, err := command.New(command.Config{Limiter: testserver.NewGroup(t, testkit.NewClock(), nil).Limiter()})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Handler = cmds
	srv, err := resp.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(remoteListener{ln}) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-ctx.Done():
			t.Error("Serve did not return after Shutdown")
		}
	})
	return &testserver.Server{Addr: ln.Addr().String(), Server: srv, Commands: cmds}
}

// TestProtectedModeRefusalOfASilentTLSSocketBlocksNoAccept: on a TLS port
// beyond loopback without a password, protected mode refuses everyone; one
// idle socket from anyone must not keep the others from their answer.
func TestProtectedModeRefusalOfASilentTLSSocketBlocksNoAccept(t *testing.T) {
	pair := newTLSPair(t)
	ts := serveRemote(t, resp.Config{TLS: pair.server, ProtectedMode: true})
	silent(t, ts, func(st resp.Stats) bool { return st.RejectedConnections == 1 })
	for i := range 3 {
		c, err := dialTLS(t, ts.Addr, pair.client)
		if err != nil {
			t.Fatalf("TLS client %d behind a silent socket: %v", i, err)
		}
		if got, err := c.r.ReadString('\n'); !strings.HasPrefix(got, "-DENIED bucketd is running in protected mode") {
			t.Fatalf("TLS client %d behind a silent socket: %q, %v", i, got, err)
		}
	}
}

// TestPlainSilentSocketsDelayNoClient: without TLS too, a silent socket
// that holds a slot, and one refused beyond --max-clients, delay nobody.
func TestPlainSilentSocketsDelayNoClient(t *testing.T) {
	ts := startServer(t, func(cfg *resp.Config) { cfg.MaxClients = 2 })
	silent(t, ts, func(st resp.Stats) bool { return st.ConnectedClients == 1 })
	c := dialPlain(t, ts.Addr)
	if got, err := c.ping(); got != "+PONG\r\n" {
		t.Fatalf("client beside a silent socket: %q, %v", got, err)
	}
	refused := silent(t, ts, func(st resp.Stats) bool { return st.RejectedConnections == 1 })
	c.Close()
	testkit.Eventually(t, promptly, "the client gone", func() bool { return ts.Server.Stats().ConnectedClients == 1 })
	c = dialPlain(t, ts.Addr)
	if got, err := c.ping(); got != "+PONG\r\n" {
		t.Fatalf("client after a refused silent socket: %q, %v", got, err)
	}
	r := bufio.NewReader(refused)
	refused.SetReadDeadline(time.Now().Add(promptly)) //nolint:errcheck // a fresh conn
	if got, err := r.ReadString('\n'); got != "-ERR max number of clients reached\r\n" {
		t.Fatalf("the refused silent socket read %q, %v", got, err)
	}
}

// startServer runs the front on shards on a fake clock, with the
// connection server's Config adjusted.
func startServer(t testing.TB, adjust func(*resp.Config)) *testserver.Server {
	t.Helper()
	return testserver.Start(t, testserver.Options{Server: adjust})
}

// readToEnd reads c until the server closes it, within promptly, and
// fails the test if the server does not.
func readToEnd(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(promptly)) //nolint:errcheck // a fresh conn
	buf := make([]byte, 512)
	for {
		_, err := c.Read(buf)
		if err == nil {
			continue
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("%s: still open after %v", what, promptly)
		}
		return
	}
}

// TestTLSHandshakeFailuresAreCountedAndBounded is issue 10 item 10: a
// failed TLS handshake shows in a counter. A plain client on the TLS port
// fails at once; a silent socket, admitted or refused, fails when the
// handshake timeout ends it, and an admitted one gives its slot back.
func TestTLSHandshakeFailuresAreCountedAndBounded(t *testing.T) {
	pair := newTLSPair(t)
	ts := startServer(t, func(cfg *resp.Config) {
		cfg.TLS = pair.server
		cfg.MaxClients = 2
		cfg.HandshakeTimeout = 200 * time.Millisecond // real time is the point: the server ends silent sockets
	})
	failures := func(n int64) func() bool {
		return func() bool { return ts.Server.Stats().TLSHandshakeFailures == n }
	}
	plain := dialPlain(t, ts.Addr)
	plain.Write([]byte("PING\r\n")) //nolint:errcheck // the server may have closed it already
	readToEnd(t, plain, "a plain client on the TLS port")
	testkit.Eventually(t, promptly, "the plain client's handshake counted", failures(1))

	testkit.Eventually(t, promptly, "no client left", func() bool { return ts.Server.Stats().ConnectedClients == 0 })
	admitted := silent(t, ts, func(st resp.Stats) bool { return st.ConnectedClients == 1 })
	readToEnd(t, admitted, "an admitted silent socket")
	testkit.Eventually(t, promptly, "its slot given back", func() bool { return ts.Server.Stats().ConnectedClients == 0 })
	testkit.Eventually(t, promptly, "the admitted silent socket counted", failures(2))

	for range 2 {
		c, err := dialTLS(t, ts.Addr, pair.client)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := c.ping(); got != "+PONG\r\n" {
			t.Fatalf("TLS client: %q, %v", got, err)
		}
	}
	refused := silent(t, ts, func(st resp.Stats) bool { return st.RejectedConnections == 1 })
	readToEnd(t, refused, "a refused silent socket")
	testkit.Eventually(t, promptly, "the refused silent socket counted", failures(3))
	if st := ts.Server.Stats(); st.TotalConnections != 4 || st.RejectedConnections != 1 {
		t.Fatalf("connections %d (want 4: the plain client, the admitted silent socket, two TLS clients), rejected %d (want 1)",
			st.TotalConnections, st.RejectedConnections)
	}
}

// TestShutdownCutsPendingHandshakesAndRefusals: a shutdown does not wait
// for silent sockets, whether their handshake or their refusal is
// pending, and a handshake it cuts short is not a failure.
func TestShutdownCutsPendingHandshakesAndRefusals(t *testing.T) {
	pair := newTLSPair(t)
	ts := startServer(t, func(cfg *resp.Config) {
		cfg.TLS = pair.server
		cfg.MaxClients = 1
		cfg.HandshakeTimeout = time.Hour
	})
	admitted := silent(t, ts, func(st resp.Stats) bool { return st.ConnectedClients == 1 })
	refused := silent(t, ts, func(st resp.Stats) bool { return st.RejectedConnections == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ts.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with a handshake and a refusal pending: %v", err)
	}
	readToEnd(t, admitted, "the admitted silent socket after shutdown")
	readToEnd(t, refused, "the refused silent socket after shutdown")
	if n := ts.Server.Stats().TLSHandshakeFailures; n != 0 {
		t.Fatalf("%d handshake failures counted for handshakes the shutdown cut short", n)
	}
}

// TestSilentTLSRefusalsHoldBoundedDescriptors: refusals waiting for a TLS
// handshake are bounded (16 at once), so silent sockets beyond
// --max-clients cannot take every descriptor: one more is closed at once,
// without its reply, and admitted clients are still served.
func TestSilentTLSRefusalsHoldBoundedDescriptors(t *testing.T) {
	pair := newTLSPair(t)
	ts := startServer(t, func(cfg *resp.Config) {
		cfg.TLS = pair.server
		cfg.MaxClients = 1
		cfg.HandshakeTimeout = time.Hour
	})
	c, err := dialTLS(t, ts.Addr, pair.client)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 16 {
		silent(t, ts, func(st resp.Stats) bool { return st.RejectedConnections == int64(i+1) })
	}
	extra := silent(t, ts, func(st resp.Stats) bool { return st.RejectedConnections == 17 })
	readToEnd(t, extra, "a 17th silent socket refused while 16 refusals wait for their handshake")
	if got, err := c.ping(); got != "+PONG\r\n" {
		t.Fatalf("the admitted TLS client beside 16 pending refusals: %q, %v", got, err)
	}
}
