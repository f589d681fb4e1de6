package redisurl

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestFailoverParses(t *testing.T) {
	o, err := Failover("redis-sentinel://app:s%40cret@10.0.0.1:26380,sentinel-b,[::1]:26381/my-master?db=2&sentinel_password=sp&dial_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	if o.MasterName != "my-master" || o.DB != 2 || o.Username != "app" || o.Password != "s@cret" ||
		o.SentinelUsername != "" || o.SentinelPassword != "sp" || o.DialTimeout != 2*time.Second || o.TLSConfig != nil {
		t.Fatalf("options %+v", o)
	}
	want := []string{"10.0.0.1:26380", "sentinel-b:26379", "[::1]:26381"}
	if !slices.Equal(o.SentinelAddrs, want) {
		t.Fatalf("sentinels %v, want %v", o.SentinelAddrs, want)
	}

	o, err = Failover("REDIS-SENTINEL://h:1/m?sentinel_username=su&sentinel_password=sp")
	if err != nil {
		t.Fatal(err)
	}
	if o.MasterName != "m" || o.DB != 0 || o.Password != "" || o.SentinelUsername != "su" || o.SentinelPassword != "sp" ||
		!slices.Equal(o.SentinelAddrs, []string{"h:1"}) {
		t.Fatalf("options %+v", o)
	}
}

func TestFailoverRefuses(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"redis://h:6379/0", "not a Sentinel URL"},
		{"redis-sentinel://:s3cret@h:26379", "the path of a Sentinel URL is the master's name"},
		{"redis-sentinel://:s3cret@h:26379/", "the path of a Sentinel URL is the master's name"},
		{"redis-sentinel://:s3cret@h:26379/m/0", "the path of a Sentinel URL is the master's name"},
		{"redis-sentinel://:s3cret@/m", `sentinel "" is not host:port`},
		{"redis-sentinel://:s3cret@h:0/m", `sentinel "h:0" is not host:port`},
		{"redis-sentinel://:s3cret@h:26379,h:x/m", `sentinel "h:x" is not host:port`},
		{"redis-sentinel://:s3cret@h:26379,/m", `sentinel "" is not host:port`},
		{"redis-sentinel://:s3cret@h:26379/m?db=x", "db is the database number"},
		{"redis-sentinel://:s3cret@h:26379/m?db=-1", "db is the database number"},
		{"redis-sentinel://h:26379/m?password=s3cret", "no password parameter"},
		{"redis-sentinel://h:26379/m?master_name=x", "no master_name parameter"},
		{"redis-sentinel://h:26379/m?addr=h2:1", "no addr parameter"},
		{"redis-sentinel://:s3cret@h:26379/m?colour=red", "redis: unexpected option: colour"},
		{"redis-sentinel://:s3cret@h:26379/m?pool_size=many", "invalid pool_size"},
		{"redis-sentinel://:s3/cret@h:26379/m", "not a valid URL"},
		{"redis-sentinel://:s3cret@h:26379/m#s3cret", "not a valid URL"},
		{"redis-sentinel://:s3%zzcret@h:26379/m", "not a valid URL"},
	} {
		_, err := Failover(tc.url)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.url, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: the error shows the password: %v", tc.url, err)
		}
	}
}

func TestIsSentinel(t *testing.T) {
	for v, want := range map[string]bool{
		"redis-sentinel://h/m": true,
		"Redis-Sentinel://h/m": true,
		"redis://h":            false,
		"rediss://h":           false,
		"redis-sentinel:h":     false,
		"":                     false,
	} {
		if IsSentinel(v) != want {
			t.Errorf("IsSentinel(%q) = %v", v, !want)
		}
	}
}
