package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves the operator endpoints:
//
//   - GET /metrics: the registry in the Prometheus text format, or in
//     OpenMetrics or protobuf when the scraper's Accept header asks;
//   - GET /healthz: 200 "ok" whenever the process can answer HTTP at all
//     (liveness: restart the process when this fails);
//   - GET /readyz: 200 "ready" when ready() reports true, 503 "not ready"
//     otherwise (readiness: send clients only while this succeeds).
//
// A nil ready counts as always ready. ready is called once per /readyz
// request and must be safe for concurrent use. HEAD works wherever GET does;
// other methods get 405.
func Handler(reg *prometheus.Registry, ready func() bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		// A scrape reads atomics; this only stops a flood of scrapes from
		// piling up goroutines.
		MaxRequestsInFlight: 10,
		// OpenMetrics to a scraper that asks for it (Prometheus does); the
		// classic text format to everyone else.
		EnableOpenMetrics: true,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeText(w, http.StatusOK, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ready == nil || ready() {
			writeText(w, http.StatusOK, "ready\n")
			return
		}
		writeText(w, http.StatusServiceUnavailable, "not ready\n")
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		writeText(w, http.StatusOK, "bucketd\n\n/metrics  Prometheus metrics\n/healthz  liveness\n/readyz   readiness\n")
	})
	return mux
}

// WithProfiling serves h and, under /debug/pprof/, Go's profiling
// endpoints (net/http/pprof): the index, every runtime profile (heap,
// allocs, goroutine, mutex, block …), a CPU profile
// (/debug/pprof/profile?seconds=N, 30 by default), symbols and an
// execution trace. It is opt-in (--pprof) because a profile shows what
// the process does to anyone who can reach the port. The command line
// (/debug/pprof/cmdline) is not served: it may hold --requirepass. A CPU
// profile or trace lasts longer than Start's write timeout allows a reply;
// net/http/pprof moves the deadline of that one request by its duration.
func WithProfiling(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol) // go tool pprof may look symbols up this way
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("GET /debug/pprof/cmdline", func(w http.ResponseWriter, _ *http.Request) {
		writeText(w, http.StatusNotFound, "not served: the command line may hold a password\n")
	})
	return mux
}

func writeText(w http.ResponseWriter, code int, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	io.WriteString(w, body) //nolint:errcheck // the client went away; nothing to do
}

// Server serves an http.Handler, normally Handler's, on a listener of its
// own. Start it with Start and stop it with Shutdown; the goroutine that
// serves ends in Shutdown.
type Server struct {
	ln   net.Listener
	srv  *http.Server
	done chan struct{} // closed when the serving goroutine has returned
	err  error         // why serving stopped, if not Shutdown; read after done
}

// Start listens on addr (host:port; port 0 picks a free one, see Addr) and
// serves h in a goroutine until Shutdown. A listen error, such as an address
// already in use, is returned at once. logger receives the HTTP server's own
// errors; nil means slog.Default().
func Start(addr string, h http.Handler, logger *slog.Logger) (*Server, error) {
	if logger == nil {
		logger = slog.Default()
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen: %w", err)
	}
	s := &Server{
		ln: ln,
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 5 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       2 * time.Minute,
			ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		},
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics server stopped", "addr", ln.Addr().String(), "err", err)
			s.err = fmt.Errorf("metrics: serve: %w", err)
		}
	}()
	return s, nil
}

// Addr returns the address the server listens on, with the actual port
// when Start was given port 0.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Shutdown stops accepting, waits for requests in progress until ctx ends,
// then closes whatever connections remain and waits for the serving
// goroutine to return. It returns ctx's error if requests were cut off, and
// the serving error if serving had failed before. Calling it again returns
// at once.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.srv.Close() //nolint:errcheck // forcing the remaining connections closed; err says why
		err = fmt.Errorf("metrics: shutdown: %w", err)
	}
	<-s.done
	return errors.Join(err, s.err)
}

// HealthzURL returns the /healthz URL of a Handler served on addr
// (host:port, as --metrics-addr takes it). A wildcard host (empty, 0.0.0.0
// or ::) is reached through 127.0.0.1. The error is net.SplitHostPort's.
func HealthzURL(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/healthz", nil
}

// healthTimeout bounds CheckHealth: a container HEALTHCHECK must not hang
// on a process that accepts connections but no longer answers.
const healthTimeout = 2 * time.Second

// CheckHealth GETs url, normally a HealthzURL, and returns nil when it
// answers 200 within two seconds: the client side of /healthz, for
// container HEALTHCHECKs in images without curl. Otherwise the error is
// the HTTP client's, or says what url answered.
func CheckHealth(url string) error {
	client := &http.Client{Timeout: healthTimeout}
	res, err := client.Get(url)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", url, res.Status)
	}
	return nil
}
