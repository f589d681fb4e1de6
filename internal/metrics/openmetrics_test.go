package metrics

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestScrapeFormatFollowsAccept: a scraper that asks for OpenMetrics (as
// Prometheus does, first in its Accept header) gets it; one that asks for
// nothing in particular gets the classic text format. docs/metrics.md says
// both.
func TestScrapeFormatFollowsAccept(t *testing.T) {
	reg, m := newRegistry(t, fakeSources(true))
	m.ObservePipeline(0.001, 1)
	ts := httptest.NewServer(Handler(reg, nil))
	defer ts.Close()

	for _, tc := range []struct {
		name, accept string
		wantType     string
		wantBody     []string // substrings
		wantEnd      string
	}{
		{
			name: "Prometheus's Accept header",
			// What Prometheus 2.x and 3.x send, OpenMetrics first.
			accept:   "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
			wantType: "application/openmetrics-text; version=1.0.0; charset=utf-8",
			wantBody: []string{
				"# TYPE bucketd_decisions counter\n", // OpenMetrics names the family without _total
				`bucketd_decisions_total{policy="",result="allowed"} 1000.0` + "\n",
				"# TYPE bucketd_buckets gauge\n",
				`bucketd_command_duration_seconds_bucket{le="0.001"} 1` + "\n",
			},
			wantEnd: "# EOF\n",
		},
		{
			name:     "no Accept header",
			wantType: "text/plain; version=0.0.4; charset=utf-8",
			wantBody: []string{
				"# TYPE bucketd_decisions_total counter\n",
				`bucketd_decisions_total{policy="",result="allowed"} 1000` + "\n",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest("GET", ts.URL+"/metrics", nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.accept != "" {
				req.Header.Set("Accept", tc.accept)
			}
			res, err := ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			body, err := io.ReadAll(res.Body)
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Header.Get("Content-Type"); !strings.HasPrefix(got, tc.wantType) {
				t.Errorf("Content-Type %q, want %q", got, tc.wantType)
			}
			for _, want := range tc.wantBody {
				if !strings.Contains(string(body), want) {
					t.Errorf("body lacks %q", want)
				}
			}
			if !strings.HasSuffix(string(body), tc.wantEnd) {
				t.Errorf("body does not end with %q:\n…%s", tc.wantEnd, body[max(0, len(body)-200):])
			}
		})
	}
}
