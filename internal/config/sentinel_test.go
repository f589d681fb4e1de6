package config

import (
	"io"
	"strings"
	"testing"
)

// TestSentinelURLs: --replicate and --store take redis-sentinel:// URLs,
// from every source, and keep them as written; the store mode follows.
func TestSentinelURLs(t *testing.T) {
	const u = "redis-sentinel://:s3cret@10.0.0.1:26379,10.0.0.2/mymaster?db=1&sentinel_password=p4ss"
	c, err := Load([]string{"--replicate", u}, nil, io.Discard)
	if err != nil || c.Replicate != u || c.StoreMode() {
		t.Fatalf("--replicate: %v, %q, store mode %v", err, c.Replicate, c.StoreMode())
	}
	c, err = Load(nil, envOf(map[string]string{"BUCKETD_STORE": u}), io.Discard)
	if err != nil || c.Store != u || !c.StoreMode() {
		t.Fatalf("BUCKETD_STORE: %v, %q, store mode %v", err, c.Store, c.StoreMode())
	}
	c, err = Load([]string{"--config", writeFile(t, "store: "+u)}, nil, io.Discard)
	if err != nil || c.Store != u {
		t.Fatalf("file: %v, %q", err, c.Store)
	}
}

// TestSentinelURLErrors: a wrong Sentinel URL is refused at start with
// what to write instead, and neither password shows.
func TestSentinelURLErrors(t *testing.T) {
	for _, tc := range []struct{ name, url, want string }{
		{"no master", "redis-sentinel://:s3cret@h:26379",
			`"redis-sentinel://:xxxxx@h:26379": the path of a Sentinel URL is the master's name`},
		{"bad port", "redis-sentinel://:s3cret@h:26379,h2:0/m",
			`"redis-sentinel://:xxxxx@h:26379,h2:0/m": sentinel "h2:0" is not host:port`},
		{"bad db", "redis-sentinel://h/m?db=one&sentinel_password=p4ss",
			`"redis-sentinel://h/m?db=one&sentinel_password=xxxxx": db is the database number`},
		{"password parameter", "redis-sentinel://h/m?password=s3cret",
			`"redis-sentinel://h/m?password=xxxxx": no password parameter in a Sentinel URL`},
		{"unknown option", "redis-sentinel://:s3cret@h/m?colour=red",
			`"redis-sentinel://:xxxxx@h/m?colour=red": redis: unexpected option: colour`},
		{"ipv6 list unparsable", "redis-sentinel://:s3cret@[::1]:1,[::2]:2/m?colour=red",
			`"[hidden: not a URL, may hold a password]": redis: unexpected option: colour`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, flag := range []string{"--replicate", "--store"} {
				_, err := Load([]string{flag, tc.url}, nil, io.Discard)
				if err == nil || !strings.HasPrefix(err.Error(), flag+" "+tc.want) {
					t.Errorf("%s: error\n %v\nwant it to start with\n %s %s", flag, err, flag, tc.want)
					continue
				}
				if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "p4ss") {
					t.Errorf("%s: the error shows a password: %v", flag, err)
				}
			}
		})
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://h:6379/0":                                        "redis://h:6379/0",
		"redis://:pw@h:6379/0":                                    "redis://:xxxxx@h:6379/0",
		"redis-sentinel://u:pw@a:1,b:2/m?db=2":                    "redis-sentinel://u:xxxxx@a:1,b:2/m?db=2",
		"redis-sentinel://a:1/m?sentinel_password=pw":             "redis-sentinel://a:1/m?sentinel_password=xxxxx",
		"redis-sentinel://[::1]:1,[::2]:2/m":                      "redis-sentinel://[::1]:1,[::2]:2/m",
		"redis-sentinel://[::1]:1,[::2]:2/m?sentinel_password=pw": "[hidden: not a URL, may hold a password]",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
