package config

import (
	"github.com/bucketd/bucketd/internal/policy"

	"bytes"
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// envOf returns a getenv over m.
func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// writeFile writes content to a new file in a temporary directory and
// returns its path.
func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bucketd.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// dump returns every setting of c as get prints it.
func dump(c Config) map[string]string {
	m := make(map[string]string, len(settings))
	for i := range settings {
		m[settings[i].name] = settings[i].get(&c)
	}
	return m
}

func TestDefaults(t *testing.T) {
	c, err := Load(nil, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"addr":                       "127.0.0.1:6380",
		"shards":                     strconv.Itoa(DefaultShards()),
		"max-key-bytes":              "1024",
		"max-query-bytes":            "67108864",
		"max-args":                   "1048576",
		"shutdown-timeout":           "10s",
		"log-level":                  "info",
		"log-format":                 "text",
		"metrics-addr":               "127.0.0.1:9380",
		"pprof":                      "false",
		"requirepass":                "",
		"tls-cert":                   "",
		"tls-key":                    "",
		"tls-ca-cert":                "",
		"protected-mode":             "true",
		"max-clients":                "10000",
		"idle-timeout":               "0s",
		"client-output-buffer-limit": "normal 33554432 8388608 60 pubsub 33554432 8388608 60",
		"replicate":                  "",
		"replicate-prefix":           "tb:",
		"replicate-queue":            "65536",
		"replicate-interval":         "1s",
		"store":                      "",
		"store-cluster":              "",
		"redis-timeout":              "50ms",
		"on-redis-error":             "deny",
		"leases":                     "false",
		"lease-target":               "1s",
		"lease-max-share":            "0.1",
		"lease-ttl":                  "2s",
		"max-buckets":                "0",
		"data-dir":                   "",
		"snapshot-interval":          "1m0s",
		"ignore-corrupt-snapshot":    "false",
		"reload-allow-empty":         "false",
		"slowlog-log-slower-than":    "10000",
		"slowlog-max-len":            "128",
	}
	got := dump(c)
	if len(got) != len(want) {
		t.Errorf("%d settings, want %d: update this test with the new setting", len(got), len(want))
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s = %q, want %q", name, got[name], w)
		}
	}
	if c.LogLevel != slog.LevelInfo || c.ShutdownTimeout != 10*time.Second || c.RedisTimeout != 50*time.Millisecond ||
		!c.ProtectedMode || c.StoreCluster != nil || c.File != "" {
		t.Errorf("typed defaults wrong: %+v", c)
	}
	if c.Policies == nil || len(c.Policies) != 0 {
		t.Errorf("Policies = %v, want an empty non-nil map", c.Policies)
	}
	if d := dump(Default()); !equalMaps(d, got) {
		t.Errorf("Default() = %v, want what Load gives with no sources, %v", d, got)
	}
	if n := DefaultShards(); n < 2 || n > maxShards {
		t.Errorf("DefaultShards() = %d", n)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

// TestPrecedence adds the sources one at a time, lowest first, and checks
// that each one overrides the one below: flag > env > file > default.
func TestPrecedence(t *testing.T) {
	type val struct{ raw, want string }
	cases := []struct {
		name             string
		file, env, flag  val
		defaultOverrides bool // the file value differs from the default
	}{
		{name: "addr", file: val{"127.0.0.1:1001", "127.0.0.1:1001"}, env: val{"127.0.0.1:1002", "127.0.0.1:1002"}, flag: val{"127.0.0.1:1003", "127.0.0.1:1003"}},
		{name: "shards", file: val{"3", "3"}, env: val{" 5 ", "5"}, flag: val{"7", "7"}},
		{name: "max-key-bytes", file: val{"2048", "2048"}, env: val{"4096", "4096"}, flag: val{"8192", "8192"}},
		{name: "max-clients", file: val{"0", "0"}, env: val{"5", "5"}, flag: val{"6", "6"}},
		{name: "shutdown-timeout", file: val{"20s", "20s"}, env: val{"1m", "1m0s"}, flag: val{"1500ms", "1.5s"}},
		{name: "idle-timeout", file: val{"1s", "1s"}, env: val{"5m", "5m0s"}, flag: val{"0", "0s"}},
		{name: "protected-mode", file: val{"false", "false"}, env: val{"yes", "true"}, flag: val{"0", "false"}},
		{name: "log-level", file: val{"warn", "warn"}, env: val{"ERROR", "error"}, flag: val{"debug", "debug"}},
		{name: "on-redis-error", file: val{"allow", "allow"}, env: val{"deny", "deny"}, flag: val{"Allow", "allow"}},
		{name: "metrics-addr", file: val{"", ""}, env: val{"127.0.0.1:9999", "127.0.0.1:9999"}, flag: val{"", ""}},
		{name: "requirepass", file: val{"a", "a"}, env: val{"b", "b"}, flag: val{"c", "c"}},
		{name: "replicate-prefix", file: val{"x:", "x:"}, env: val{"y:", "y:"}, flag: val{"z:", "z:"}},
		{name: "store-cluster", file: val{"h:1,h:2", "h:1,h:2"}, env: val{"h:3", "h:3"}, flag: val{" h:4 , h:5 ", "h:4,h:5"}},
		{name: "replicate", file: val{"redis://a:6379", "redis://a:6379"}, env: val{"rediss://:pw@b/2", "rediss://:pw@b/2"}, flag: val{"redis://c", "redis://c"}},
	}
	def := dump(Default())
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			file := writeFile(t, tc.name+": "+strconv.Quote(tc.file.raw)+"\n")
			env := map[string]string{}
			var args []string
			wants := []string{def[tc.name], tc.file.want, tc.env.want, tc.flag.want}
			for layer, want := range wants {
				switch layer {
				case 1:
					env["BUCKETD_CONFIG"] = file
				case 2:
					env[envName(tc.name)] = tc.env.raw
				case 3:
					args = append(args, "--"+tc.name+"="+tc.flag.raw)
				}
				c, err := Load(args, envOf(env), io.Discard)
				if err != nil {
					t.Fatalf("layer %d: %v", layer, err)
				}
				if got := dump(c)[tc.name]; got != want {
					t.Errorf("layer %d (args %q, env %q): %s = %q, want %q", layer, args, env, tc.name, got, want)
				}
			}
		})
	}
}

// TestSourcesCombine checks that settings from different sources end up in
// one Config, with unquoted YAML values of every type.
func TestSourcesCombine(t *testing.T) {
	file := writeFile(t, `# bucketd settings
addr: 127.0.0.1:7000
shards: 8
shutdown-timeout: 3s
protected-mode: no
log-format: json
metrics-addr:
store-cluster: 10.0.0.1:7000, 10.0.0.2:7000
`)
	env := map[string]string{"BUCKETD_MAX_ARGS": "100", "BUCKETD_SHARDS": "16"}
	c, err := Load([]string{"--config", file, "--protected-mode", "--max-key-bytes", "99"}, envOf(env), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != "127.0.0.1:7000" || c.Shards != 16 || c.ShutdownTimeout != 3*time.Second || !c.ProtectedMode ||
		c.LogFormat != "json" || c.MetricsAddr != "" || c.MaxArgs != 100 || c.MaxKeyBytes != 99 ||
		!slices.Equal(c.StoreCluster, []string{"10.0.0.1:7000", "10.0.0.2:7000"}) || c.File != file {
		t.Errorf("got %+v", c)
	}
}

func TestBooleans(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want bool
	}{
		{"true", true}, {"TRUE", true}, {"yes", true}, {"Yes", true}, {"1", true},
		{"false", false}, {"False", false}, {"no", false}, {"NO", false}, {"0", false},
	} {
		for _, src := range []string{"env", "flag", "file"} {
			var args []string
			env := map[string]string{}
			switch src {
			case "env":
				env["BUCKETD_PROTECTED_MODE"] = tc.raw
			case "flag":
				args = []string{"--protected-mode=" + tc.raw}
			case "file":
				args = []string{"--config", writeFile(t, "protected-mode: "+tc.raw+"\n")}
			}
			c, err := Load(args, envOf(env), io.Discard)
			if err != nil {
				t.Errorf("%s %q: %v", src, tc.raw, err)
				continue
			}
			if c.ProtectedMode != tc.want {
				t.Errorf("%s %q: ProtectedMode = %v, want %v", src, tc.raw, c.ProtectedMode, tc.want)
			}
		}
	}
	// A bare boolean flag means true.
	c, err := Load([]string{"--protected-mode"}, envOf(map[string]string{"BUCKETD_PROTECTED_MODE": "no"}), io.Discard)
	if err != nil || !c.ProtectedMode {
		t.Errorf("--protected-mode over BUCKETD_PROTECTED_MODE=no: %v, %v", c.ProtectedMode, err)
	}
}

// TestErrors checks every validation error and its message. {file} in want
// stands for the config file's path.
func TestErrors(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		env     map[string]string
		file    string // config file content, passed with --config; "" for none
		want    string // the whole message, or with contains a part of it
		partial bool
		hide    string // must not appear in the message
	}{
		// Values, one source each.
		{name: "shards zero", args: []string{"--shards", "0"}, want: `--shards "0": use a whole number from 1 to 65536`},
		{name: "shards too many", args: []string{"--shards=65537"}, want: `--shards "65537": use a whole number from 1 to 65536`},
		{name: "shards not a number", args: []string{"--shards", "many"}, want: `--shards "many": use a whole number from 1 to 65536`},
		{name: "shards env", env: map[string]string{"BUCKETD_SHARDS": "0"}, want: `BUCKETD_SHARDS="0": use a whole number from 1 to 65536`},
		{name: "shards file", file: "\nshards: 0\n", want: `{file}:2: shards "0": use a whole number from 1 to 65536`},
		{name: "max-key-bytes", args: []string{"--max-key-bytes", "0"}, want: `--max-key-bytes "0": use a whole number of at least 1`},
		{name: "max-query-bytes", env: map[string]string{"BUCKETD_MAX_QUERY_BYTES": "1023"}, want: `BUCKETD_MAX_QUERY_BYTES="1023": use a whole number of at least 1024`},
		{name: "max-args", file: "max-args: 5", want: `{file}:1: max-args "5": use a whole number of at least 6 (TB.ACQUIRE key capacity rate cost WITHINFO)`},
		{name: "shutdown-timeout zero", args: []string{"--shutdown-timeout", "0s"}, want: `--shutdown-timeout "0s": use a positive duration such as 10s or 1m30s`},
		{name: "shutdown-timeout no unit", file: "shutdown-timeout: 10", want: `{file}:1: shutdown-timeout "10": use a positive duration such as 10s or 1m30s`},
		{name: "log-level", args: []string{"--log-level", "loud"}, want: `--log-level "loud": use debug, info, warn or error`},
		{name: "log-level offset", env: map[string]string{"BUCKETD_LOG_LEVEL": "INFO+2"}, want: `BUCKETD_LOG_LEVEL="INFO+2": use debug, info, warn or error`},
		{name: "log-format", args: []string{"--log-format", "xml"}, want: `--log-format "xml": use text or json`},
		{name: "slowlog-log-slower-than", args: []string{"--slowlog-log-slower-than", "-2"}, want: `--slowlog-log-slower-than "-2": use a whole number of microseconds, 0 for every command, or -1 for none`},
		{name: "slowlog-max-len", env: map[string]string{"BUCKETD_SLOWLOG_MAX_LEN": "65537"}, want: `BUCKETD_SLOWLOG_MAX_LEN="65537": use a whole number from 0 to 65536`},
		{name: "addr", args: []string{"--addr", "6380"}, want: `--addr "6380": use host:port, such as 127.0.0.1:6380`},
		{name: "addr empty", args: []string{"--addr="}, want: `--addr "": use host:port, such as 127.0.0.1:6380`},
		{name: "addr port", file: "addr: 127.0.0.1:70000", want: `{file}:1: addr "127.0.0.1:70000": use host:port, such as 127.0.0.1:6380`},
		{name: "metrics-addr", env: map[string]string{"BUCKETD_METRICS_ADDR": "localhost"}, want: `BUCKETD_METRICS_ADDR="localhost": use host:port, such as 127.0.0.1:6380, or an empty value to disable it`},
		{name: "protected-mode", args: []string{"--protected-mode=maybe"}, want: `--protected-mode "maybe": use true or false (also yes/no, 1/0)`},
		{name: "protected-mode env", env: map[string]string{"BUCKETD_PROTECTED_MODE": "on"}, want: `BUCKETD_PROTECTED_MODE="on": use true or false (also yes/no, 1/0)`},
		{name: "max-clients", args: []string{"--max-clients", "-1"}, want: `--max-clients "-1": use a whole number of clients, or 0 for no limit`},
		{name: "idle-timeout short", args: []string{"--idle-timeout", "500ms"}, want: `--idle-timeout "500ms": use 0 (never) or a duration of at least 1s, such as 5m`},
		{name: "idle-timeout negative", env: map[string]string{"BUCKETD_IDLE_TIMEOUT": "-1s"}, want: `BUCKETD_IDLE_TIMEOUT="-1s": use 0 (never) or a duration of at least 1s, such as 5m`},
		{name: "replicate scheme", args: []string{"--replicate", "http://h:6379"}, want: `--replicate "http://h:6379": use a redis:// or rediss:// (TLS) URL, such as redis://:password@10.0.0.5:6379/0, or for Redis Sentinel a URL such as redis-sentinel://:password@10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379/mymaster`},
		{name: "replicate no host", args: []string{"--replicate", "redis://"}, want: `--replicate "redis://": use a redis:// or rediss:// (TLS) URL, such as redis://:password@10.0.0.5:6379/0, or for Redis Sentinel a URL such as redis-sentinel://:password@10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379/mymaster`},
		{name: "replicate bare host", args: []string{"--replicate", "10.0.0.5:6379"}, want: `--replicate "10.0.0.5:6379": use a redis:// or rediss:// (TLS) URL, such as redis://:password@10.0.0.5:6379/0, or for Redis Sentinel a URL such as redis-sentinel://:password@10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379/mymaster`},
		{name: "replicate port", args: []string{"--replicate", "redis://h:0"}, want: `--replicate "redis://h:0": use a redis:// or rediss:// (TLS) URL, such as redis://:password@10.0.0.5:6379/0, or for Redis Sentinel a URL such as redis-sentinel://:password@10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379/mymaster`},
		{name: "replicate db", env: map[string]string{"BUCKETD_REPLICATE": "redis://h/x"}, want: `BUCKETD_REPLICATE="redis://h/x": the path of the URL is the database number: use /0, /1 and so on, or leave it out`},
		{name: "replicate password hidden", args: []string{"--replicate", "http://u:s3cret@h"}, want: `--replicate "http://u:xxxxx@h": use a redis:// or rediss:// (TLS) URL, such as redis://:password@10.0.0.5:6379/0, or for Redis Sentinel a URL such as redis-sentinel://:password@10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379/mymaster`, hide: "s3cret"},
		{name: "store password hidden unparsable", args: []string{"--store", "redis://:s3cret@h:port"}, want: `--store "[hidden: not a URL, may hold a password]": use a redis:// or rediss:// (TLS) URL`, partial: true, hide: "s3cret"},
		{name: "replicate-queue", args: []string{"--replicate-queue", "0"}, want: `--replicate-queue "0": use a whole number of at least 1`},
		{name: "store", file: "store: foo", want: `{file}:1: store "foo": use a redis:// or rediss:// (TLS) URL, such as redis://:password@10.0.0.5:6379/0, or for Redis Sentinel a URL such as redis-sentinel://:password@10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379/mymaster`},
		{name: "store-cluster empty node", args: []string{"--store-cluster", "a:1,,b:2"}, want: `--store-cluster "a:1,,b:2": node "" is not host:port: use a comma-separated list such as 10.0.0.1:7000,10.0.0.2:7000`},
		{name: "store-cluster no port", args: []string{"--store-cluster", "a"}, want: `--store-cluster "a": node "a" is not host:port: use a comma-separated list such as 10.0.0.1:7000,10.0.0.2:7000`},
		{name: "store-cluster port zero", env: map[string]string{"BUCKETD_STORE_CLUSTER": "a:1, b:0"}, want: `BUCKETD_STORE_CLUSTER="a:1, b:0": node "b:0" is not host:port: use a comma-separated list such as 10.0.0.1:7000,10.0.0.2:7000`},
		{name: "store-cluster no host", args: []string{"--store-cluster", ":7000"}, want: `--store-cluster ":7000": node ":7000" is not host:port: use a comma-separated list such as 10.0.0.1:7000,10.0.0.2:7000`},
		{name: "redis-timeout", args: []string{"--redis-timeout", "0"}, want: `--redis-timeout "0": use a positive duration such as 50ms`},
		{name: "on-redis-error", args: []string{"--on-redis-error", "retry"}, want: `--on-redis-error "retry": use allow or deny`},

		// An overridden bad value is still an error.
		{name: "bad env under flag", args: []string{"--shards", "4"}, env: map[string]string{"BUCKETD_SHARDS": "x"}, want: `BUCKETD_SHARDS="x": use a whole number from 1 to 65536`},
		{name: "bad file under env", env: map[string]string{"BUCKETD_SHARDS": "4"}, file: "shards: x", want: `{file}:1: shards "x": use a whole number from 1 to 65536`},

		// Settings that go together or exclude each other.
		{name: "tls-cert alone", args: []string{"--tls-cert", "c.pem"}, want: `tls-cert (from --tls-cert) needs tls-key too: give the certificate's private key, or drop tls-cert`},
		{name: "tls-key alone", file: "tls-key: k.pem", want: `tls-key (from {file}:1) needs tls-cert too: give the certificate of the key, or drop tls-key`},
		{name: "tls-ca-cert alone", env: map[string]string{"BUCKETD_TLS_CA_CERT": "ca.pem"}, want: `tls-ca-cert (from BUCKETD_TLS_CA_CERT) needs tls-cert and tls-key: mutual TLS needs the server's own certificate as well`},
		{name: "tls files missing", args: []string{"--tls-cert", "/nonexistent/c.pem", "--tls-key", "/nonexistent/k.pem"},
			want: `tls-cert (from --tls-cert) and tls-key (from --tls-key): open /nonexistent/c.pem: no such file or directory: give a PEM certificate and its matching PEM private key`},
		{name: "pprof without metrics", args: []string{"--pprof", "--metrics-addr="},
			want: `pprof (from --pprof) needs metrics-addr: the profiles are served by the metrics server; give --metrics-addr host:port, or drop pprof`},
		{name: "store and store-cluster", args: []string{"--store", "redis://h"}, env: map[string]string{"BUCKETD_STORE_CLUSTER": "h:7000"},
			want: `store (from --store) and store-cluster (from BUCKETD_STORE_CLUSTER) cannot both be set: use store for a standalone Redis, store-cluster for a Redis Cluster`},
		{name: "replicate and store", file: "replicate: redis://a\nstore: redis://b\n",
			want: `replicate (from {file}:1) cannot be combined with store (from {file}:2): in store mode Redis already holds the buckets; drop one of them`},
		{name: "replicate and store-cluster", args: []string{"--store-cluster", "h:7000"}, env: map[string]string{"BUCKETD_REPLICATE": "redis://a"},
			want: `replicate (from BUCKETD_REPLICATE) cannot be combined with store-cluster (from --store-cluster): in store mode Redis already holds the buckets; drop one of them`},

		// The file itself.
		{name: "unknown key", file: "addr: 127.0.0.1:1\nlisten: 0.0.0.0:1\n", want: `{file}:2: unknown key "listen": use the flag names listed by bucketd --help, or policies`},
		{name: "unknown key snake case", file: "max_key_bytes: 10", want: `{file}:1: unknown key "max_key_bytes" (did you mean max-key-bytes?): use the flag names listed by bucketd --help, or policies`},
		{name: "unknown key policy", file: "policy: {}", want: `{file}:1: unknown key "policy" (did you mean policies?): use the flag names listed by bucketd --help, or policies`},
		{name: "config key in file", file: "config: other.yaml", want: `{file}:1: unknown key "config": use the flag names listed by bucketd --help, or policies`},
		{name: "list value", file: "addr:\n  - a\n  - b\n", want: `{file}:2: addr: give a single value, not a list or a mapping`},
		{name: "duplicate key", file: "shards: 2\nmax-args: 10\nshards: 4\n", want: `{file}:3: shards is already set on line 1: keep one of them`},
		{name: "not a mapping", file: "- addr\n", want: `{file}:1: the file must be a mapping of setting names to values, like "max-key-bytes: 2048"`},
		{name: "yaml syntax", file: "addr: [\n", want: `config file {file}: yaml: `, partial: true},
		{name: "missing file", env: map[string]string{"BUCKETD_CONFIG": "/nonexistent/bucketd.yaml"},
			want: `config file (from BUCKETD_CONFIG): open /nonexistent/bucketd.yaml: no such file or directory: check the path`},
		{name: "empty config flag", args: []string{"--config="}, want: `--config "": give the path of a YAML config file, or leave the flag out`},

		// The command line.
		{name: "argument", args: []string{"--shards", "2", "extra"}, want: `unexpected argument "extra": bucketd takes only flags (see --help)`},
		{name: "boolean with a space", args: []string{"--protected-mode", "false"}, want: `unexpected argument "false": bucketd takes only flags (see --help); give a boolean flag its value with =, as in --protected-mode=false`},
		{name: "unknown flag", args: []string{"--nope"}, want: `flag provided but not defined: -nope`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			file := ""
			if tc.file != "" {
				file = writeFile(t, tc.file)
				args = append([]string{"--config", file}, args...)
			}
			_, err := Load(args, envOf(tc.env), io.Discard)
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			want := strings.ReplaceAll(tc.want, "{file}", file)
			got := err.Error()
			if tc.partial && !strings.Contains(got, want) || !tc.partial && got != want {
				t.Errorf("error\n got %s\nwant %s", got, want)
			}
			if tc.hide != "" && strings.Contains(got, tc.hide) {
				t.Errorf("error %q shows %q", got, tc.hide)
			}
		})
	}
}

func TestFileEdgeCases(t *testing.T) {
	for _, tc := range []struct{ name, file string }{
		{"empty", ""},
		{"comments only", "# nothing yet\n"},
		{"null document", "~\n"},
		{"empty policies", "policies:\n"},
		{"quoted number", `shards: "2"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load([]string{"--config", writeFile(t, tc.file)}, nil, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if c.Policies == nil || len(c.Policies) != 0 {
				t.Errorf("Policies = %v, want empty", c.Policies)
			}
		})
	}
}

func TestPolicies(t *testing.T) {
	file := writeFile(t, `
policies:
  api:
    capacity: 100
    rate: 10        # tokens per second
  login-per-ip:
    capacity: 5
    rate: 0.0166667
    prefix: "login:"
  big: &big {capacity: 1e15, rate: 1e15}
  alias: *big
  "x.y/z_1": {capacity: 1.5, rate: 2, prefix: ~}
`)
	c, err := Load([]string{"--config", file}, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]policy.Policy{
		"api":          one(100, 10, ""),
		"login-per-ip": one(5, 0.0166667, "login:"),
		"big":          one(1e15, 1e15, ""),
		"alias":        one(1e15, 1e15, ""),
		"x.y/z_1":      one(1.5, 2, ""),
	}
	if len(c.Policies) != len(want) {
		t.Errorf("got %d policies %v, want %d", len(c.Policies), c.Policies, len(want))
	}
	for name, p := range want {
		if got, ok := c.Policies[name]; !ok || !reflect.DeepEqual(got, p) {
			t.Errorf("policy %q = %+v (present %v), want %+v", name, got, ok, p)
		}
	}
}

func TestPolicyErrors(t *testing.T) {
	const pre = "policies:\n"
	cases := []struct{ name, file, want string }{
		{"not a mapping", "policies: [api]", "{file}:1: policies: give a mapping from policy name to its capacity and rate, like\npolicies:\n  api:\n    capacity: 100\n    rate: 10"},
		{"policy not a mapping", pre + "  api: 10", `{file}:2: policy "api": give a mapping with capacity (tokens) and rate (tokens per second), or with limits`},
		{"name with space", pre + "  my api: {capacity: 1, rate: 1}", `{file}:2: policy name "my api": use printable ASCII without spaces, like api or login-per-ip`},
		{"name not ascii", pre + "  café: {capacity: 1, rate: 1}", `{file}:2: policy name "café": use printable ASCII without spaces, like api or login-per-ip`},
		{"name empty", pre + `  "": {capacity: 1, rate: 1}`, `{file}:2: policy name "": use printable ASCII without spaces, like api or login-per-ip`},
		{"name control", pre + `  "a\tb": {capacity: 1, rate: 1}`, `{file}:2: policy name "a\tb": use printable ASCII without spaces, like api or login-per-ip`},
		{"duplicate", pre + "  api: {capacity: 1, rate: 1}\n  api: {capacity: 2, rate: 2}", `{file}:3: policy "api" is defined twice: keep one of them`},
		{"capacity zero", pre + "  api: {capacity: 0, rate: 1}", `{file}:2: policies.api.capacity "0": use a number greater than 0 and at most 1e+15`},
		{"capacity negative", pre + "  api:\n    capacity: -1\n    rate: 1", `{file}:3: policies.api.capacity "-1": use a number greater than 0 and at most 1e+15`},
		{"capacity too big", pre + "  api: {capacity: 1.1e15, rate: 1}", `{file}:2: policies.api.capacity "1.1e15": use a number greater than 0 and at most 1e+15`},
		{"capacity infinite", pre + "  api: {capacity: .inf, rate: 1}", `{file}:2: policies.api.capacity ".inf": use a number greater than 0 and at most 1e+15`},
		{"capacity NaN", pre + "  api: {capacity: .nan, rate: 1}", `{file}:2: policies.api.capacity ".nan": use a number greater than 0 and at most 1e+15`},
		{"capacity word", pre + "  api: {capacity: ten, rate: 1}", `{file}:2: policies.api.capacity "ten": use a number greater than 0 and at most 1e+15`},
		{"capacity quoted", pre + `  api: {capacity: "10", rate: 1}`, `{file}:2: policies.api.capacity "10": use a number greater than 0 and at most 1e+15`},
		{"capacity list", pre + "  api: {capacity: [1], rate: 1}", `{file}:2: policies.api.capacity "": use a number greater than 0 and at most 1e+15`},
		{"rate zero", pre + "  api: {capacity: 1, rate: 0}", `{file}:2: policies.api.rate "0": use a number greater than 0 and at most 1e+15`},
		{"rate too big", pre + "  api: {capacity: 1, rate: 2e15}", `{file}:2: policies.api.rate "2e15": use a number greater than 0 and at most 1e+15`},
		{"rate -inf", pre + "  api: {capacity: 1, rate: -.inf}", `{file}:2: policies.api.rate "-.inf": use a number greater than 0 and at most 1e+15`},
		{"no capacity", pre + "  api: {rate: 1}", `{file}:2: policy "api" has no capacity: give capacity (the burst, in tokens), or write the rate as N/second, N/minute, N/hour or N/day, whose N is then the capacity`},
		{"no rate", pre + "  api:\n    capacity: 1", `{file}:2: policy "api" has no rate: give rate (tokens per second, or N/second, N/minute, N/hour or N/day) and capacity (the burst, in tokens)`},
		{"unknown key", pre + "  api:\n    capacity: 1\n    rate: 1\n    burst: 5", `{file}:5: unknown key "burst" in policy "api": use capacity, rate, prefix, shadow and limits`},
		{"prefix list", pre + "  api: {capacity: 1, rate: 1, prefix: [a]}", `{file}:2: policies.api.prefix: give a single string`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			file := writeFile(t, tc.file)
			_, err := Load([]string{"--config", file}, nil, io.Discard)
			want := strings.ReplaceAll(tc.want, "{file}", file)
			if err == nil || err.Error() != want {
				t.Errorf("error\n got %v\nwant %s", err, want)
			}
		})
	}
}

func TestReload(t *testing.T) {
	const base = "shards: 4\nmax-clients: 100\nlog-level: info\npolicies:\n  api: {capacity: 10, rate: 1}\n"
	t.Run("policy capacity", func(t *testing.T) {
		file := writeFile(t, base)
		c := mustLoad(t, []string{"--config", file}, nil)
		rewrite(t, file, strings.Replace(base, "capacity: 10", "capacity: 20", 1))
		next, restart, err := c.Reload(nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := next.Policies["api"].Limits[0].Capacity; got != 20 {
			t.Errorf("capacity after reload = %v, want 20", got)
		}
		if len(restart) != 0 {
			t.Errorf("restart = %q, want none", restart)
		}
		if got := c.Policies["api"].Limits[0].Capacity; got != 10 {
			t.Errorf("the old Config changed: capacity %v", got)
		}
	})
	t.Run("policies added and removed", func(t *testing.T) {
		file := writeFile(t, base)
		c := mustLoad(t, []string{"--config", file}, nil)
		rewrite(t, file, "shards: 4\nmax-clients: 100\npolicies:\n  web: {capacity: 3, rate: 3, prefix: w:}\n")
		next, restart, err := c.Reload(nil)
		if err != nil || len(restart) != 0 {
			t.Fatalf("restart %q, err %v", restart, err)
		}
		if _, ok := next.Policies["api"]; ok || !reflect.DeepEqual(next.Policies["web"], one(3, 3, "w:")) {
			t.Errorf("policies = %v", next.Policies)
		}
	})
	t.Run("broken file keeps the old config", func(t *testing.T) {
		for _, broken := range []string{
			"policies:\n  api: {capacity: 10, rate: 1\n",             // YAML syntax
			"policies:\n  api: {capacity: -5, rate: 1}\n",            // invalid policy
			"shards: 4\nshard: 5\n",                                  // unknown key
			"shards: 0\npolicies:\n  api: {capacity: 99, rate: 1}\n", // invalid restart-only setting
		} {
			file := writeFile(t, base)
			c := mustLoad(t, []string{"--config", file}, nil)
			rewrite(t, file, broken)
			next, restart, err := c.Reload(nil)
			if err == nil {
				t.Errorf("%q: no error", broken)
				continue
			}
			if !strings.Contains(err.Error(), file) {
				t.Errorf("%q: error %q does not name the file", broken, err)
			}
			if restart != nil || next.Policies["api"].Limits[0].Capacity != 10 || next.Shards != 4 || c.Policies["api"].Limits[0].Capacity != 10 {
				t.Errorf("%q: got %+v, restart %q; want the old config", broken, next, restart)
			}
		}
		file := writeFile(t, base)
		c := mustLoad(t, []string{"--config", file}, nil)
		if err := os.Remove(file); err != nil {
			t.Fatal(err)
		}
		if next, _, err := c.Reload(nil); err == nil || next.Policies["api"].Limits[0].Capacity != 10 {
			t.Errorf("missing file: err %v, policies %v", err, next.Policies)
		}
	})
	t.Run("slowlog settings apply live", func(t *testing.T) {
		file := writeFile(t, base)
		c := mustLoad(t, []string{"--config", file}, nil)
		rewrite(t, file, base+"slowlog-log-slower-than: -1\nslowlog-max-len: 5\n")
		next, restart, err := c.Reload(nil)
		if err != nil || len(restart) != 0 {
			t.Fatalf("restart %q, err %v", restart, err)
		}
		if next.SlowlogLogSlowerThan != -1 || next.SlowlogMaxLen != 5 {
			t.Errorf("slowlog = %d, %d; want -1, 5", next.SlowlogLogSlowerThan, next.SlowlogMaxLen)
		}
		if got := next.sources["slowlog-max-len"]; !strings.Contains(got, file) {
			t.Errorf("source of slowlog-max-len = %q, want the file", got)
		}
	})
	t.Run("restart-only change", func(t *testing.T) {
		file := writeFile(t, base)
		c := mustLoad(t, []string{"--config", file}, nil)
		rewrite(t, file, strings.NewReplacer("shards: 4", "shards: 8", "max-clients: 100", "max-clients: 200",
			"capacity: 10", "capacity: 30", "log-level: info", "log-level: debug").Replace(base))
		next, restart, err := c.Reload(nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"shards", "max-clients"}; !slices.Equal(restart, want) {
			t.Errorf("restart = %q, want %q", restart, want)
		}
		if next.Shards != 4 || next.MaxClients != 100 {
			t.Errorf("restart-only settings applied: shards %d, max-clients %d", next.Shards, next.MaxClients)
		}
		if next.Policies["api"].Limits[0].Capacity != 30 || next.LogLevel != slog.LevelDebug {
			t.Errorf("live settings not applied: %v, %v", next.Policies, next.LogLevel)
		}
		// Until the restart, every reload reports the pending change again.
		_, again, err := next.Reload(nil)
		if err != nil || !slices.Equal(again, restart) {
			t.Errorf("second reload: restart %q, err %v", again, err)
		}
	})
	t.Run("flags stay fixed", func(t *testing.T) {
		file := writeFile(t, base)
		c := mustLoad(t, []string{"--config", file, "--shards", "2", "--log-level", "warn"}, nil)
		rewrite(t, file, strings.NewReplacer("shards: 4", "shards: 16", "log-level: info", "log-level: error").Replace(base))
		next, restart, err := c.Reload(nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(restart) != 0 || next.Shards != 2 || next.LogLevel != slog.LevelWarn {
			t.Errorf("restart %q, shards %d, level %v; want the flags to keep winning", restart, next.Shards, next.LogLevel)
		}
	})
	t.Run("environment re-read", func(t *testing.T) {
		file := writeFile(t, base)
		env := map[string]string{"BUCKETD_CONFIG": file, "BUCKETD_LOG_LEVEL": "warn"}
		c := mustLoad(t, nil, env)
		env["BUCKETD_LOG_LEVEL"] = "error"
		env["BUCKETD_IDLE_TIMEOUT"] = "1m"
		env["BUCKETD_CONFIG"] = "/elsewhere.yaml" // the file stays the one Load read
		next, restart, err := c.Reload(envOf(env))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(restart, []string{"idle-timeout"}) || next.LogLevel != slog.LevelError || next.File != file {
			t.Errorf("restart %q, level %v, file %q", restart, next.LogLevel, next.File)
		}
	})
	t.Run("a file caught in a rewrite keeps the policies", func(t *testing.T) {
		const two = "log-level: info\npolicies:\n  api: {capacity: 10, rate: 1}\n  web: {capacity: 3, rate: 3}\n"
		for _, step := range []struct {
			file, flag string
			refused    bool
		}{
			// What a reload reads while the file is truncated, then written:
			{"", "", true},                  // nothing yet
			{"log-level: info\n", "", true}, // no policies key yet
			{"log-level: info\npolicies:\n", "", true},
			{"log-level: info\npolicies: {}\n", "", true},
			{"log-level: info\npolicies:\n  api: {capacity: 10, rate: 1}", "", true}, // cut short: web is missing
			// What an operator writes on purpose:
			{"log-level: info\npolicies:\n  api: {capacity: 10, rate: 1}\n", "", false}, // complete: web goes
			{"reload-allow-empty: true\n", "", false},
			{"", "--reload-allow-empty", false},
			{"policies:\n  api: {capacity: 10, rate: 1}\n  web: {capacity: 3, rate: 3}", "", false}, // no final newline, but nothing removed
		} {
			file := writeFile(t, two)
			args := []string{"--config", file}
			if step.flag != "" {
				args = append(args, step.flag)
			}
			c := mustLoad(t, args, nil)
			rewrite(t, file, step.file)
			next, _, err := c.Reload(nil)
			if !step.refused {
				if err != nil {
					t.Errorf("%q %s: %v", step.file, step.flag, err)
				}
				continue
			}
			if err == nil || len(next.Policies) != 2 {
				t.Errorf("%q: err %v, policies %v; want the reload refused and both policies kept", step.file, err, next.Policies)
				continue
			}
			for _, want := range []string{file, "would remove", "rename it over", "reload-allow-empty"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%q: error %q lacks %q", step.file, err, want)
				}
			}
		}
		// Without policies in force, an empty file takes nothing away.
		file := writeFile(t, "log-level: info\n")
		c := mustLoad(t, []string{"--config", file}, nil)
		rewrite(t, file, "")
		if _, _, err := c.Reload(nil); err != nil {
			t.Errorf("empty file, no policies in force: %v", err)
		}
	})
	t.Run("no file", func(t *testing.T) {
		c := mustLoad(t, []string{"--shards", "3"}, nil)
		next, restart, err := c.Reload(nil)
		if err != nil || len(restart) != 0 || next.Shards != 3 {
			t.Errorf("restart %q, shards %d, err %v", restart, next.Shards, err)
		}
	})
}

func mustLoad(t *testing.T, args []string, env map[string]string) Config {
	t.Helper()
	c, err := Load(args, envOf(env), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func rewrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestHelp(t *testing.T) {
	for _, arg := range []string{"--help", "-h"} {
		var out bytes.Buffer
		_, err := Load([]string{arg}, nil, &out)
		if !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%s: error %v, want flag.ErrHelp", arg, err)
		}
		help := out.String()
		def := Default()
		for i := range settings {
			s := &settings[i]
			d := s.get(&def)
			if d == "" {
				d = "none"
			}
			for _, want := range []string{
				"\n  --" + s.name + " ",
				"env " + envName(s.name) + ", default " + d,
			} {
				if !strings.Contains(help, want) {
					t.Errorf("%s: help lacks %q", arg, want)
				}
			}
		}
		for _, want := range []string{
			"--config file", "env BUCKETD_CONFIG, default none",
			"The keys of the config file equal the flag\nnames",
			"policies:", "flag, an\nenvironment variable", "SIGHUP",
			"(2 x GOMAXPROCS)", "\n  --version\n",
		} {
			if !strings.Contains(help, want) {
				t.Errorf("%s: help lacks %q", arg, want)
			}
		}
	}
}

// TestDocExample loads the example config file of docs/configuration.md, so
// that the documentation stays valid. Its TLS files do not exist here, so
// the tls- lines are left out.
func TestDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```yaml\n# /etc/bucketd/bucketd.yaml\n")
	example, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("no example config file in docs/configuration.md")
	}
	var kept []string
	for line := range strings.Lines(example) {
		if !strings.HasPrefix(line, "tls-") {
			kept = append(kept, line)
		}
	}
	c, err := Load([]string{"--config", writeFile(t, strings.Join(kept, ""))}, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Policies) != 3 || c.Policies["login-per-ip"].Prefix != "login:" || c.IdleTimeout != 5*time.Minute || c.RequirePass != "change-me" {
		t.Errorf("got %+v", c)
	}
}

// TestWeakPassword: the examples' placeholders (any case) and passwords
// under MinPasswordLength characters are weak; no password is not this
// check's business.
func TestWeakPassword(t *testing.T) {
	for pass, want := range map[string]string{
		"":                   "",
		"change-me":          "placeholder",
		"CHANGE-ME":          "placeholder",
		"s3cret":             "placeholder",
		"hunter2":            "short",
		"sixteen-chars-xx":   "",
		"fifteen-chars-x":    "short",
		"ééééééééééééééé":    "short", // 15 characters in 30 bytes
		"0123456789abcdef01": "",
	} {
		c := Default()
		c.RequirePass = pass
		if got := c.WeakPassword(); got != want {
			t.Errorf("WeakPassword(%q) = %q, want %q", pass, got, want)
		}
	}
}
