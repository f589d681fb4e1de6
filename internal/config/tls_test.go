package config

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bucketd/bucketd/internal/testcert"
)

func writeCert(t *testing.T, dir, name string) (certFile, keyFile string) {
	return testcert.WriteFiles(t, dir, name)
}

func TestTLSOff(t *testing.T) {
	tc, err := Default().TLSConfig()
	if tc != nil || err != nil {
		t.Errorf("TLSConfig() = %v, %v; want nil, nil when TLS is off", tc, err)
	}
}

func TestTLSServer(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeCert(t, dir, "server")
	c := mustLoad(t, []string{"--tls-cert", cert, "--tls-key", key}, nil)
	tc, err := c.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	if tc.MinVersion != tls.VersionTLS12 || len(tc.Certificates) != 1 || tc.ClientAuth != tls.NoClientCert || tc.ClientCAs != nil {
		t.Errorf("tls.Config = %+v", tc)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(mustRead(t, cert))
	if srvErr, cliErr := handshake(t, tc, &tls.Config{RootCAs: pool, ServerName: "localhost"}); srvErr != nil || cliErr != nil {
		t.Errorf("handshake: server %v, client %v", srvErr, cliErr)
	}
	if _, cliErr := handshake(t, tc, &tls.Config{RootCAs: pool, ServerName: "localhost", MaxVersion: tls.VersionTLS11}); cliErr == nil {
		t.Error("a TLS 1.1 client connected")
	}
}

func TestTLSMutual(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeCert(t, dir, "server")
	clientCert, clientKey := writeCert(t, dir, "client")
	c := mustLoad(t, nil, map[string]string{
		"BUCKETD_TLS_CERT": cert, "BUCKETD_TLS_KEY": key, "BUCKETD_TLS_CA_CERT": clientCert,
	})
	tc, err := c.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	if tc.ClientAuth != tls.RequireAndVerifyClientCert || tc.ClientCAs == nil || tc.MinVersion != tls.VersionTLS12 {
		t.Fatalf("tls.Config = %+v", tc)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(mustRead(t, cert))
	client, err := tls.LoadX509KeyPair(clientCert, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	if srvErr, cliErr := handshake(t, tc, &tls.Config{RootCAs: roots, ServerName: "localhost", Certificates: []tls.Certificate{client}}); srvErr != nil || cliErr != nil {
		t.Errorf("handshake with a client certificate: server %v, client %v", srvErr, cliErr)
	}
	if srvErr, _ := handshake(t, tc, &tls.Config{RootCAs: roots, ServerName: "localhost"}); srvErr == nil {
		t.Error("a client without a certificate connected")
	}
	// A certificate the CA did not sign is refused too.
	other, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	if srvErr, _ := handshake(t, tc, &tls.Config{RootCAs: roots, ServerName: "localhost", Certificates: []tls.Certificate{other}}); srvErr == nil {
		t.Error("a client with an unknown certificate connected")
	}
}

func TestTLSErrors(t *testing.T) {
	dir := t.TempDir()
	certA, keyA := writeCert(t, dir, "a")
	_, keyB := writeCert(t, dir, "b")
	notPEM := filepath.Join(dir, "ca.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"key of another cert", []string{"--tls-cert", certA, "--tls-key", keyB},
			"tls-cert (from --tls-cert) and tls-key (from --tls-key): tls: private key does not match public key: give a PEM certificate and its matching PEM private key"},
		{"key is not a cert", []string{"--tls-cert", keyA, "--tls-key", keyA},
			"tls-cert (from --tls-cert) and tls-key (from --tls-key): tls: failed to find certificate PEM data in certificate input"},
		{"CA not PEM", []string{"--tls-cert", certA, "--tls-key", keyA, "--tls-ca-cert", notPEM},
			`tls-ca-cert (from --tls-ca-cert): no PEM certificate in "` + notPEM + `": give a PEM file of CA certificates (-----BEGIN CERTIFICATE-----)`},
		{"CA missing", []string{"--tls-cert", certA, "--tls-key", keyA, "--tls-ca-cert", filepath.Join(dir, "none.pem")},
			"tls-ca-cert (from --tls-ca-cert): open " + filepath.Join(dir, "none.pem") + ": no such file or directory: give a readable PEM file of CA certificates"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.args, nil, io.Discard)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("error\n got %v\nwant %s", err, tc.want)
			}
		})
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// handshake runs a TLS handshake between srv and cli over loopback TCP and
// returns the server's and the client's error. The client reads one byte
// after its handshake, so that a certificate the server rejects after the
// client finished (TLS 1.3) shows up as a client error too.
func handshake(t *testing.T, srv, cli *tls.Config) (srvErr, cliErr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer conn.Close()
		s := tls.Server(conn, srv)
		err = s.Handshake()
		if err == nil {
			_, err = s.Write([]byte{'+'})
		}
		done <- err
	}()
	conn, err := tls.Dial("tcp", ln.Addr().String(), cli)
	if err == nil {
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	return <-done, err
}

// TestTLSConfigSetInCode covers a Config built with Default and filled in by
// the caller: errors name the settings without a source.
func TestTLSConfigSetInCode(t *testing.T) {
	c := Default()
	c.TLSCert, c.TLSKey = "/nonexistent/c.pem", "/nonexistent/k.pem"
	_, err := c.TLSConfig()
	want := "tls-cert and tls-key: open /nonexistent/c.pem: no such file or directory"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %v, want prefix %q", err, want)
	}
}
