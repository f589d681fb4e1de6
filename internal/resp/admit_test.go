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
	if got := srv.refusal(remote); !strings.HasPrefix(got, "DENIED ") {
		t.Fatalf("protected mode let a non-loopback client in without a password: %q", got)
	}
	if got := srv.refusal(local); got != "" {
		t.Fatalf("protected mode refused a loopback client: %q", got)
	}
	withPass, _ := NewServer(Config{Limiter: newInlineLimiter(), ProtectedMode: true, RequirePass: "p"})
	if got := withPass.refusal(remote); got != "" {
		t.Fatalf("with a password, protected mode must admit remote clients (they still need AUTH): %q", got)
	}
	off, _ := NewServer(Config{Limiter: newInlineLimiter()})
	if got := off.refusal(remote); got != "" {
		t.Fatalf("--protected-mode=false must admit remote clients: %q", got)
	}
	full, _ := NewServer(Config{Limiter: newInlineLimiter(), MaxClients: 1})
	full.n.connected.Store(1)
	if got := full.refusal(local); got != "ERR max number of clients reached" {
		t.Fatalf("--max-clients 1 with one client: %q", got)
	}
}
