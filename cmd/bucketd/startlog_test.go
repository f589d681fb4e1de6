package main

import (
	"bytes"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bucketd/bucketd/internal/config"
)

// TestWarnIfExposed: on an address beyond loopback, no password, a
// placeholder from the examples and a short password each get their
// warning, a long password none; on loopback nothing is said. The address
// is a value handed to the check, so nothing listens beyond loopback.
func TestWarnIfExposed(t *testing.T) {
	wildcard := &net.TCPAddr{IP: net.IPv4zero, Port: 6380}
	loopback := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 6380}
	for _, tc := range []struct {
		name      string
		addr      net.Addr
		pass      string
		protected bool
		want      string // "" means no log line at all
	}{
		{"no password", wildcard, "", true, "LISTENING BEYOND LOOPBACK WITHOUT A PASSWORD: protected mode"},
		{"no password, protected mode off", wildcard, "", false, "WITH PROTECTED MODE OFF"},
		{"the shipped placeholder", wildcard, "change-me", true, "THE PASSWORD IS A PLACEHOLDER"},
		{"a short password", wildcard, "hunter2", true, "THE PASSWORD IS SHORT"},
		{"a long password", wildcard, "0123456789abcdef0123", true, ""},
		{"loopback, placeholder", loopback, "change-me", true, ""},
		{"loopback, no password", loopback, "", true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log bytes.Buffer
			cfg := config.Default()
			cfg.RequirePass, cfg.ProtectedMode = tc.pass, tc.protected
			d := &daemon{cfg: cfg, logger: slog.New(slog.NewTextHandler(&log, nil))}
			d.warnIfExposed(tc.addr)
			got := log.String()
			switch {
			case tc.want == "" && got != "":
				t.Errorf("logged %q, want nothing", got)
			case tc.want != "" && (!strings.Contains(got, tc.want) || !strings.Contains(got, "level=WARN")):
				t.Errorf("logged %q, want a WARN with %q", got, tc.want)
			case tc.pass != "" && strings.Contains(got, tc.pass):
				t.Errorf("the log shows the password: %q", got)
			}
		})
	}
}

// TestListeningLineSaysWhatIsInForce: the listening line names the config
// file and counts its policies, and says whether a password is set,
// never which.
func TestListeningLineSaysWhatIsInForce(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bucketd.yaml")
	if err := os.WriteFile(file, []byte("requirepass: sw0rdfish-long-enough\npolicies:\n  api:\n    capacity: 10\n    rate: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	line := func(p *process) string {
		for l := range strings.Lines(p.stderr.String()) {
			if strings.Contains(l, "msg=listening") {
				return l
			}
		}
		t.Fatalf("no listening line:\n%s", p.stderr)
		return ""
	}
	plain := line(startBinary(t))
	if !strings.Contains(plain, " password=false policies=0 ") || strings.Contains(plain, "config=") {
		t.Errorf("without a config file: %q, want password=false policies=0 and no config", plain)
	}
	withFile := line(startBinary(t, "--config", file))
	if !strings.Contains(withFile, " password=true policies=1 config="+file+" ") {
		t.Errorf("with %s: %q, want password=true policies=1 config=%s", file, withFile, file)
	}
	if strings.Contains(withFile, "sw0rdfish") {
		t.Errorf("the listening line shows the password: %q", withFile)
	}
}
