package resp_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/resp"
	"github.com/bucketd/bucketd/internal/resp/wire"
	"github.com/bucketd/bucketd/internal/testkit"
)

// busyHandler's sessions take every command to mean work that does not
// look at the socket (a CPU-bound command) until release is closed; busy
// gets a value when one starts.
type busyHandler struct {
	busy    chan struct{}
	release chan struct{}
}

func (h busyHandler) Open(*resp.Conn) resp.Session { return busySession(h) }

type busySession busyHandler

func (s busySession) Serve([]wire.Command) bool {
	s.busy <- struct{}{}
	<-s.release
	return true
}

func (busySession) Closed(bool) {}

// TestShutdownNeverWaitsPastItsContext is issue 19 item 3: a connection
// whose command goes on (its client gone, or not) does not hold a shutdown
// past its context: Shutdown closes the sockets when the context ends and
// returns its error then, while the command's goroutine ends whenever the
// command does. bucketd passes --shutdown-timeout as that context, so the
// final snapshot is written within it.
func TestShutdownNeverWaitsPastItsContext(t *testing.T) {
	h := busyHandler{busy: make(chan struct{}, 1), release: make(chan struct{})}
	srv, err := resp.NewServer(resp.Config{Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	c := dialPlain(t, ln.Addr().String())
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	<-h.busy
	c.Close() // the client leaves; its command goes on

	const timeout = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(ctx) }()
	released := false
	select {
	case err = <-done:
	case <-time.After(5 * time.Second):
		t.Errorf("Shutdown has not returned 5 s after it began, with a %v context: it waits for the command", timeout)
		close(h.release)
		released = true
		err = <-done
	}
	took := time.Since(start)
	t.Logf("Shutdown with a %v context and a command that runs on: returned after %v: %v", timeout, took.Round(time.Millisecond), err)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown = %v, want the context's error", err)
	}
	if took > timeout+500*time.Millisecond {
		t.Errorf("Shutdown returned %v after its context's %v ended; want at once", (took - timeout).Round(time.Millisecond), timeout)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if !released {
		close(h.release)
	}
	testkit.Eventually(t, 5*time.Second, "the command's goroutine ended", func() bool { return srv.Stats().ConnectedClients == 0 })
}
