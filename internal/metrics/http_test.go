package metrics

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// get fetches url and returns the status code, body and Content-Type.
func get(t *testing.T, client *http.Client, method, url string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(body), res.Header.Get("Content-Type")
}

func TestHandlerEndpoints(t *testing.T) {
	reg, m := newRegistry(t, fakeSources(false))
	m.ObservePipeline(0.001, 1)
	var ready atomic.Bool
	ts := httptest.NewServer(Handler(reg, ready.Load))
	defer ts.Close()
	c := ts.Client()

	for _, step := range []struct {
		name, method, path string
		setReady           bool
		code               int
		body               string // exact, or a substring for /metrics
	}{
		{"alive while not ready", "GET", "/healthz", false, 200, "ok\n"},
		{"not ready", "GET", "/readyz", false, 503, "not ready\n"},
		{"ready", "GET", "/readyz", true, 200, "ready\n"},
		{"alive while ready", "GET", "/healthz", true, 200, "ok\n"},
		{"ready again", "GET", "/readyz", true, 200, "ready\n"},
		{"not ready again", "GET", "/readyz", false, 503, "not ready\n"},
		{"HEAD probe", "HEAD", "/healthz", false, 200, ""},
		{"metrics", "GET", "/metrics", false, 200, "bucketd_buckets 42\n"},
		{"index", "GET", "/", false, 200, "/metrics"},
		{"unknown path", "GET", "/nope", false, 404, ""},
		{"wrong method", "POST", "/readyz", false, 405, ""},
	} {
		ready.Store(step.setReady)
		code, body, ctype := get(t, c, step.method, ts.URL+step.path)
		if code != step.code {
			t.Errorf("%s: %s %s = %d, want %d (%q)", step.name, step.method, step.path, code, step.code, body)
			continue
		}
		switch {
		case step.path == "/metrics" || step.path == "/":
			if !strings.Contains(body, step.body) {
				t.Errorf("%s: body lacks %q:\n%s", step.name, step.body, body)
			}
		case step.code < 400 && body != step.body:
			t.Errorf("%s: body %q, want %q", step.name, body, step.body)
		}
		if step.code == 200 && step.path != "/metrics" && ctype != "text/plain; charset=utf-8" {
			t.Errorf("%s: Content-Type %q", step.name, ctype)
		}
	}
}

func TestHandlerNilReadyIsReady(t *testing.T) {
	reg, _ := newRegistry(t, fakeSources(false))
	ts := httptest.NewServer(Handler(reg, nil))
	defer ts.Close()
	if code, body, _ := get(t, ts.Client(), "GET", ts.URL+"/readyz"); code != 200 || body != "ready\n" {
		t.Errorf("/readyz = %d %q, want 200 ready", code, body)
	}
}

// TestHandlerScrape compares /metrics over HTTP with the golden file, so
// the wire format, not just the registry, carries the expected values.
func TestHandlerScrape(t *testing.T) {
	reg, m := newRegistry(t, fakeSources(false))
	observeFixed(m)
	ts := httptest.NewServer(Handler(reg, nil))
	defer ts.Close()
	want, err := os.Open("testdata/standalone.prom")
	if err != nil {
		t.Fatal(err)
	}
	defer want.Close()
	if err := testutil.ScrapeAndCompare(ts.URL+"/metrics", want, fixedNames...); err != nil {
		t.Error(err)
	}
}

func TestServerStartShutdown(t *testing.T) {
	reg, _ := newRegistry(t, fakeSources(false))
	srv, err := Start("127.0.0.1:0", Handler(reg, nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := srv.Addr().String()
	if strings.HasSuffix(addr, ":0") {
		t.Fatalf("Addr() = %s, want the port actually bound", addr)
	}
	client := &http.Client{Transport: &http.Transport{}}
	if code, body, _ := get(t, client, "GET", "http://"+addr+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	client.CloseIdleConnections()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Error("still accepting connections after Shutdown")
	}
	if err := srv.Shutdown(ctx); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
}

func TestServerStartAddressInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srv, err := Start(ln.Addr().String(), http.NotFoundHandler(), nil)
	if err == nil {
		srv.Shutdown(context.Background()) //nolint:errcheck // the test has already failed
		t.Fatal("Start on a bound address: no error")
	}
	var opErr *net.OpError
	if !errors.As(err, &opErr) || !strings.HasPrefix(err.Error(), "metrics: ") {
		t.Errorf("err = %v, want a wrapped *net.OpError with the metrics: prefix", err)
	}
}

// TestServerShutdownCutsOffSlowRequest: when ctx ends before a request
// finishes, Shutdown closes it and says so instead of hanging.
func TestServerShutdownCutsOffSlowRequest(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	srv, err := Start("127.0.0.1:0", h, nil)
	if err != nil {
		t.Fatal(err)
	}
	reqDone := make(chan error, 1)
	go func() {
		res, err := http.Get("http://" + srv.Addr().String() + "/")
		if err == nil {
			res.Body.Close()
		}
		reqDone <- err
	}()
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // already over: do not wait for the slow request
	if err := srv.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown = %v, want context.Canceled", err)
	}
	<-reqDone // the forced close ended the request one way or another
}

// TestWithProfiling: Handler alone serves no profiles; WithProfiling adds
// net/http/pprof's under /debug/pprof/ (a heap profile and a one-second CPU
// profile, gzipped protobufs, through Start's server with its write
// timeout), keeps Handler's endpoints, and never serves the command line.
func TestWithProfiling(t *testing.T) {
	reg, _ := newRegistry(t, fakeSources(false))
	plain := httptest.NewServer(Handler(reg, nil))
	defer plain.Close()
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/profile?seconds=1"} {
		if code, _, _ := get(t, plain.Client(), "GET", plain.URL+path); code != 404 {
			t.Errorf("without profiling: %s = %d, want 404", path, code)
		}
	}

	srv, err := Start("127.0.0.1:0", WithProfiling(Handler(reg, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background()) //nolint:errcheck // the test's own server
	base := "http://" + srv.Addr().String()
	client := &http.Client{Timeout: 20 * time.Second}
	for _, step := range []struct {
		path, want string
		code       int
	}{
		{"/debug/pprof/", "heap", 200},
		{"/debug/pprof/heap", "\x1f\x8b", 200}, // gzip: a protobuf profile
		{"/debug/pprof/goroutine", "\x1f\x8b", 200},
		{"/debug/pprof/profile?seconds=1", "\x1f\x8b", 200},
		{"/debug/pprof/cmdline", "not served", 404},
		{"/metrics", "bucketd_buckets 42\n", 200},
		{"/healthz", "ok\n", 200},
		{"/nope", "", 404},
	} {
		code, body, _ := get(t, client, "GET", base+step.path)
		if code != step.code || !strings.Contains(body, step.want) {
			t.Errorf("%s = %d, %d bytes starting %q; want %d with %q", step.path, code, len(body), body[:min(len(body), 40)], step.code, step.want)
		}
	}
}
