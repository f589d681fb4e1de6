package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bucketd/bucketd/internal/testcert"
	"github.com/bucketd/bucketd/internal/testkit"
)

// TestSilentSocketOnTheTLSPortBlocksNobody is issue 10 item 4 as an
// operator met it: --tls-cert and --max-clients 2, two TLS clients, and a
// third socket that connects and sends nothing. Once the two leave, new
// TLS clients are answered while the silent socket is still open.
func TestSilentSocketOnTheTLSPortBlocksNobody(t *testing.T) {
	cert, key := testcert.WriteFiles(t, t.TempDir(), "server")
	pem, err := os.ReadFile(cert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	clientTLS := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	p := startBinary(t, "--tls-cert", cert, "--tls-key", key, "--max-clients", "2")

	// ping connects with TLS and sends PING; 3 s is ample on loopback, and
	// a client stuck behind the silent socket would wait for ever.
	ping := func() (net.Conn, string) {
		d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 3 * time.Second}, Config: clientTLS}
		c, err := d.Dial("tcp", p.addr)
		if err != nil {
			return nil, "dial: " + err.Error()
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(3 * time.Second)) //nolint:errcheck // a fresh conn
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			return c, "write: " + err.Error()
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return c, line + " read: " + err.Error()
		}
		return c, line
	}
	var first []net.Conn
	for range 2 {
		c, got := ping()
		if got != "+PONG\r\n" {
			t.Fatalf("TLS client: %q", got)
		}
		first = append(first, c)
	}
	silent, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	scrape := func() string {
		res, err := (&http.Client{Timeout: 3 * time.Second}).Get("http://" + p.metrics + "/metrics")
		if err != nil {
			return ""
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return string(body)
	}
	testkit.Eventually(t, 5*time.Second, "the silent socket refused", func() bool {
		return strings.Contains(scrape(), "bucketd_rejected_connections_total 1\n")
	})
	for _, c := range first {
		c.Close()
	}
	testkit.Eventually(t, 5*time.Second, "the two TLS clients gone", func() bool {
		return strings.Contains(scrape(), "bucketd_connected_clients 0\n")
	})
	for i := range 3 {
		c, got := ping()
		if got != "+PONG\r\n" {
			t.Fatalf("TLS client %d after the first two left, the silent socket open: %q", i, got)
		}
		c.Close()
	}
	p.stop(t)
}
