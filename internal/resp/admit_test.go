package resp

import (
	"net"
	"strings"
	"testing"

	"github.com/bucketd/bucketd/internal/resp/wire"
)

// nopHandler answers nothing: tests of the connection server alone.
type nopHandler struct{}

func (nopHandler) Open(*Conn) Session { return nopSession{} }

type nopSession struct{}

func (nopSession) Serve([]wire.Command) bool { return true }
func (nopSession) Closed(bool)               {}

func TestProtectedModeAndMaxClientsAtAdmission(t *testing.T) {
	srv, err := NewServer(Config{Handler: nopHandler{}, ProtectedMode: true})
	if err != nil {
		t.Fatal(err)
	}
	remote := &net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 5000}
	local := &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 5000}
	if got := srv.refusal(remote); !strings.HasPrefix(got, "DENIED ") {
		t.Fatalf("protected mode let a non-loopback client in without a password: %q", got)
	}
	if got := srv.refusal(local); got != "" {
		t.Fatalf("protected mode refused a loopback client: %q", got)
	}
	off, _ := NewServer(Config{Handler: nopHandler{}})
	if got := off.refusal(remote); got != "" {
		t.Fatalf("--protected-mode=false must admit remote clients: %q", got)
	}
	full, _ := NewServer(Config{Handler: nopHandler{}, MaxClients: 1})
	full.n.connected.Store(1)
	if got := full.refusal(local); got != "ERR max number of clients reached" {
		t.Fatalf("--max-clients 1 with one client: %q", got)
	}
}
