package resp

import (
	"net"
	"strings"
	"testing"
)

func TestProtectedModeAndMaxClientsAtAdmission(t *testing.T) {
	srv, err := NewServer(Config{Limiter: newInlineLimiter(), ProtectedMode: true})
	if err != nil {
		t.Fatal(err)
	}
	remote := &net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 5000}
	local := &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 5000}
	c := &bufConn{}
	if srv.admit(c, remote) || !strings.HasPrefix(string(c.out), "-DENIED ") {
		t.Fatalf("protected mode let a non-loopback client in without a password: %q", c.out)
	}
	c.out = nil
	if !srv.admit(c, local) || len(c.out) != 0 {
		t.Fatalf("protected mode refused a loopback client: %q", c.out)
	}
	withPass, _ := NewServer(Config{Limiter: newInlineLimiter(), ProtectedMode: true, RequirePass: "p"})
	if !withPass.admit(&bufConn{}, remote) {
		t.Fatal("with a password, protected mode must admit remote clients (they still need AUTH)")
	}
	off, _ := NewServer(Config{Limiter: newInlineLimiter()})
	if !off.admit(&bufConn{}, remote) {
		t.Fatal("--protected-mode=false must admit remote clients")
	}
}
