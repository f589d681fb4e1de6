package metrics

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestHealthzURL(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:9380":  "http://127.0.0.1:9380/healthz",
		":9380":           "http://127.0.0.1:9380/healthz",
		"0.0.0.0:1":       "http://127.0.0.1:1/healthz",
		"[::]:2":          "http://127.0.0.1:2/healthz",
		"[::1]:3":         "http://[::1]:3/healthz",
		"metrics.local:4": "http://metrics.local:4/healthz",
	} {
		if got, err := HealthzURL(addr); err != nil || got != want {
			t.Errorf("HealthzURL(%q) = %q, %v; want %q", addr, got, err, want)
		}
	}
	if _, err := HealthzURL("9380"); err == nil {
		t.Error("HealthzURL accepted an address without a port")
	}
}

func TestCheckHealth(t *testing.T) {
	srv := httptest.NewServer(Handler(prometheus.NewRegistry(), func() bool { return false }))
	defer srv.Close()
	if err := CheckHealth(srv.URL + "/healthz"); err != nil {
		t.Fatalf("/healthz: %v", err)
	}
	// Not ready is healthy (alive), but a check pointed at /readyz fails.
	err := CheckHealth(srv.URL + "/readyz")
	if err == nil || err.Error() != srv.URL+"/readyz answered 503 Service Unavailable" {
		t.Fatalf("/readyz: %v", err)
	}
	if err := CheckHealth("http://127.0.0.1:1/healthz"); err == nil || !strings.Contains(err.Error(), "connect") {
		t.Fatalf("closed port: %v", err)
	}
}
