package config

import (
	"errors"
	"log/slog"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/bucketd/bucketd/internal/redisurl"
)

// setting describes one server setting: its flag name (which is also its
// file key and, upper-cased, its environment variable), its --help text and
// how it is parsed from text, checked and printed back.
type setting struct {
	name  string
	arg   string // placeholder for the value in --help
	usage string
	live  bool // applied by a reload without a restart
	flag  bool // a boolean: --name alone means true
	// set parses v, checks it and stores it in c. Its error is the hint that
	// tells the user what to write instead; the caller adds the source.
	set func(c *Config, v string) error
	// get prints the value held in c in the form set accepts. Reload
	// compares settings by it.
	get func(c *Config) string
	// show prints a raw value for an error message, hiding passwords.
	show func(v string) string
}

// envName is the environment variable of a setting: BUCKETD_ followed by the
// flag name in upper snake case.
func envName(name string) string {
	return "BUCKETD_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// settings lists every server setting in --help order.
var settings = []setting{
	text("addr", "host:port",
		"address to listen on for Redis clients; ':6380' or '0.0.0.0:6380' means every interface (see protected-mode)",
		func(c *Config) *string { return &c.Addr }, checkListenAddr(false)),
	integer("shards", "n",
		"number of bucket shards, each owned by one goroutine (rounded up to a power of two)",
		func(c *Config) *int { return &c.Shards }, 1, maxShards, "use a whole number from 1 to 65536"),
	integer("max-key-bytes", "bytes",
		"longest key accepted; longer keys get -ERR key too long",
		func(c *Config) *int { return &c.MaxKeyBytes }, 1, math.MaxInt, "use a whole number of at least 1"),
	integer("max-query-bytes", "bytes",
		"largest command a client may send (and most bytes of one unfinished command it may make bucketd buffer); beyond it the client gets a protocol error and is closed",
		func(c *Config) *int { return &c.MaxQueryBytes }, 1024, math.MaxInt, "use a whole number of at least 1024"),
	integer("max-args", "n",
		"most arguments in one command",
		func(c *Config) *int { return &c.MaxArgs }, 6, math.MaxInt,
		"use a whole number of at least 6 (TB.ACQUIRE key capacity rate cost WITHINFO)"),
	duration("shutdown-timeout", "duration",
		"how long a graceful shutdown waits for connections to finish",
		func(c *Config) *time.Duration { return &c.ShutdownTimeout },
		func(d time.Duration) bool { return d > 0 }, "use a positive duration such as 10s or 1m30s"),
	{
		name: "log-level", arg: "level", live: true,
		usage: "least severe log lines written: debug, info, warn or error; a reload applies it at once",
		set: func(c *Config, v string) error {
			l, ok := levels[strings.ToLower(strings.TrimSpace(v))]
			if !ok {
				return errors.New("use debug, info, warn or error")
			}
			c.LogLevel = l
			return nil
		},
		get: func(c *Config) string { return strings.ToLower(c.LogLevel.String()) },
	},
	enum("log-format", "format", "log format: text or json",
		func(c *Config) *string { return &c.LogFormat }, "text", "json"),
	text("metrics-addr", "host:port",
		"address of the HTTP server for /metrics, /healthz and /readyz; empty disables it",
		func(c *Config) *string { return &c.MetricsAddr }, checkListenAddr(true)),
	boolean("pprof",
		"also serve Go's profiles (net/http/pprof: CPU, heap, goroutines, trace) under /debug/pprof/ on metrics-addr, for go tool pprof; anyone who can reach metrics-addr can read them",
		func(c *Config) *bool { return &c.PProf }),
	{
		name: "requirepass", arg: "password",
		usage: "password clients must give with AUTH or HELLO 2 AUTH before any other command; empty means none",
		set:   func(c *Config, v string) error { c.RequirePass = v; return nil },
		get:   func(c *Config) string { return c.RequirePass },
		show:  func(string) string { return "[hidden]" },
	},
	text("tls-cert", "file",
		"PEM certificate (chain) for TLS on the client port; needs tls-key",
		func(c *Config) *string { return &c.TLSCert }, nil),
	text("tls-key", "file",
		"PEM private key of tls-cert",
		func(c *Config) *string { return &c.TLSKey }, nil),
	text("tls-ca-cert", "file",
		"PEM CA certificates; when set, clients must present a certificate signed by one of them (mutual TLS); needs tls-cert and tls-key",
		func(c *Config) *string { return &c.TLSCACert }, nil),
	boolean("protected-mode",
		"when no requirepass is set, refuse clients connecting from non-loopback addresses, as Redis does; --protected-mode=false turns it off",
		func(c *Config) *bool { return &c.ProtectedMode }),
	integer("max-clients", "n",
		"most connected clients; a client beyond it gets -ERR max number of clients reached; 0 means no limit",
		func(c *Config) *int { return &c.MaxClients }, 0, math.MaxInt, "use a whole number of clients, or 0 for no limit"),
	duration("idle-timeout", "duration",
		"close a client connection after it has sent nothing for this long; 0 means never",
		func(c *Config) *time.Duration { return &c.IdleTimeout },
		func(d time.Duration) bool { return d == 0 || d >= time.Second },
		"use 0 (never) or a duration of at least 1s, such as 5m"),
	clientOutputBufferLimit,
	redisURL("replicate",
		"copy bucket state asynchronously to the Redis at this redis:// or rediss:// URL (password in the URL), or to the master that the Sentinels of a redis-sentinel://host:port,.../master URL name; memory still decides",
		func(c *Config) *string { return &c.Replicate }),
	text("replicate-prefix", "prefix",
		"prefix of the bucket keys in Redis, in replicate and store modes",
		func(c *Config) *string { return &c.ReplicatePrefix }, nil),
	integer("replicate-queue", "n",
		"most bucket changes waiting to be sent to the replicate Redis",
		func(c *Config) *int { return &c.ReplicateQueue }, 1, math.MaxInt, "use a whole number of at least 1"),
	duration("replicate-interval", "duration",
		"how often changed buckets are written to the replicate Redis; longer coalesces more (a key changed many times is written once) and costs Redis and bucketd less CPU, shorter lags less",
		func(c *Config) *time.Duration { return &c.ReplicateInterval },
		func(d time.Duration) bool { return d >= time.Millisecond }, "use a duration of at least 1ms, such as 1s"),
	redisURL("store",
		"keep the buckets in the standalone Redis at this redis:// or rediss:// URL, or in the master that the Sentinels of a redis-sentinel://host:port,.../master URL name, instead of in memory",
		func(c *Config) *string { return &c.Store }),
	{
		name: "store-cluster", arg: "host:port,...",
		usage: "keep the buckets in the Redis Cluster reached through these comma-separated seed nodes instead of in memory",
		set: func(c *Config, v string) error {
			nodes, err := parseNodes(v)
			if err != nil {
				return err
			}
			c.StoreCluster = nodes
			return nil
		},
		get: func(c *Config) string { return strings.Join(c.StoreCluster, ",") },
	},
	duration("redis-timeout", "duration",
		"how long store mode waits for each reply from Redis before answering by on-redis-error (replication has its own, longer, per-batch timeout)",
		func(c *Config) *time.Duration { return &c.RedisTimeout },
		func(d time.Duration) bool { return d > 0 }, "use a positive duration such as 50ms"),
	enum("on-redis-error", "allow|deny",
		"what TB.ACQUIRE answers in store mode when Redis cannot answer in time: allow (fail open) or deny (fail closed)",
		func(c *Config) *string { return &c.OnRedisError }, "allow", "deny"),
	boolean("leases",
		"in store mode, answer most calls from leases of tokens this instance holds from the Redis buckets, at memory speed, never granting more across instances than one bucket would",
		func(c *Config) *bool { return &c.Leases }),
	duration("lease-target", "duration",
		"with leases, how much of a key's demand on this instance one lease covers: a longer target costs Redis fewer calls and leaves more unused in leases",
		func(c *Config) *time.Duration { return &c.LeaseTarget },
		func(d time.Duration) bool { return d >= time.Millisecond }, "use a duration of at least 1ms, such as 1s"),
	fraction("lease-max-share", "fraction",
		"with leases, the largest lease one instance holds of a bucket, as a share of its capacity",
		func(c *Config) *float64 { return &c.LeaseMaxShare }),
	duration("lease-ttl", "duration",
		"with leases, how long Redis counts a lease after the call that last renewed it: a crashed instance's lease comes back after this; the instance stops spending a lease a quarter of it earlier",
		func(c *Config) *time.Duration { return &c.LeaseTTL },
		func(d time.Duration) bool { return d >= 100*time.Millisecond }, "use a duration of at least 100ms, such as 2s"),
	integer("max-buckets", "n",
		"most live buckets kept in memory; beyond it the buckets closest to full are evicted (an evicted bucket answers as full); 0 means no limit",
		func(c *Config) *int { return &c.MaxBuckets }, 0, math.MaxInt, "use a whole number of buckets, or 0 for no limit"),
	text("data-dir", "dir",
		"directory for snapshots of all buckets, written periodically and at shutdown and loaded at start; empty disables them",
		func(c *Config) *string { return &c.DataDir }, nil),
	duration("snapshot-interval", "duration",
		"how often a snapshot is written to data-dir",
		func(c *Config) *time.Duration { return &c.SnapshotInterval },
		func(d time.Duration) bool { return d >= time.Second }, "use a duration of at least 1s, such as 1m"),
	boolean("ignore-corrupt-snapshot",
		"start with no buckets when the snapshot in data-dir is corrupt or truncated, instead of refusing to start",
		func(c *Config) *bool { return &c.IgnoreCorruptSnapshot }),
	live(boolean("reload-allow-empty",
		"let a reload apply a config file that names no policies, or whose last line has no newline, though it removes policies in force; without it such a file, which is what a reload meets in the middle of a non-atomic rewrite, is refused; may be set in that file itself",
		func(c *Config) *bool { return &c.ReloadAllowEmpty })),
	live(integer("slowlog-log-slower-than", "microseconds",
		"least time a command takes to enter SLOWLOG, in microseconds; 0 logs every command, -1 none; a reload applies it at once",
		func(c *Config) *int { return &c.SlowlogLogSlowerThan }, -1, math.MaxInt,
		"use a whole number of microseconds, 0 for every command, or -1 for none")),
	live(integer("slowlog-max-len", "n",
		"how many SLOWLOG entries are kept, the newest (each holds at most 32 arguments of 128 bytes); a reload applies it at once",
		func(c *Config) *int { return &c.SlowlogMaxLen }, 0, MaxSlowlogLen,
		"use a whole number from 0 to "+strconv.Itoa(MaxSlowlogLen))),
}

// MaxSlowlogLen bounds slowlog-max-len: an entry holds at most about
// 5 KiB, so the log at most about 320 MiB.
const MaxSlowlogLen = 65536

// live marks s as applied by a reload.
func live(s setting) setting {
	s.live = true
	return s
}

// maxShards is the most shards bucketd runs.
const maxShards = 1 << 16

var byName = func() map[string]*setting {
	m := make(map[string]*setting, len(settings))
	for i := range settings {
		m[settings[i].name] = &settings[i]
	}
	return m
}()

var levels = map[string]slog.Level{
	"debug": slog.LevelDebug,
	"info":  slog.LevelInfo,
	"warn":  slog.LevelWarn,
	"error": slog.LevelError,
}

func text(name, arg, usage string, field func(*Config) *string, check func(string) error) setting {
	return setting{
		name: name, arg: arg, usage: usage,
		set: func(c *Config, v string) error {
			if check != nil {
				if err := check(v); err != nil {
					return err
				}
			}
			*field(c) = v
			return nil
		},
		get: func(c *Config) string { return *field(c) },
	}
}

func integer(name, arg, usage string, field func(*Config) *int, lo, hi int, hint string) setting {
	return setting{
		name: name, arg: arg, usage: usage,
		set: func(c *Config, v string) error {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n < lo || n > hi {
				return errors.New(hint)
			}
			*field(c) = n
			return nil
		},
		get: func(c *Config) string { return strconv.Itoa(*field(c)) },
	}
}

// boolean is a setting that is also a bare flag: --name alone means true.
func boolean(name, usage string, field func(*Config) *bool) setting {
	return setting{
		name: name, arg: "bool", flag: true, usage: usage,
		set: func(c *Config, v string) error {
			b, ok := parseBool(v)
			if !ok {
				return errors.New("use true or false (also yes/no, 1/0)")
			}
			*field(c) = b
			return nil
		},
		get: func(c *Config) string { return strconv.FormatBool(*field(c)) },
	}
}

func duration(name, arg, usage string, field func(*Config) *time.Duration, ok func(time.Duration) bool, hint string) setting {
	return setting{
		name: name, arg: arg, usage: usage,
		set: func(c *Config, v string) error {
			d, err := time.ParseDuration(strings.TrimSpace(v))
			if err != nil || !ok(d) {
				return errors.New(hint)
			}
			*field(c) = d
			return nil
		},
		get: func(c *Config) string { return field(c).String() },
	}
}

// fraction is a setting holding a number in (0, 1].
func fraction(name, arg, usage string, field func(*Config) *float64) setting {
	return setting{
		name: name, arg: arg, usage: usage,
		set: func(c *Config, v string) error {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil || !(f > 0 && f <= 1) {
				return errors.New("use a number above 0 and at most 1, such as 0.1")
			}
			*field(c) = f
			return nil
		},
		get: func(c *Config) string { return strconv.FormatFloat(*field(c), 'g', -1, 64) },
	}
}

func enum(name, arg, usage string, field func(*Config) *string, choices ...string) setting {
	hint := "use " + strings.Join(choices, " or ")
	return setting{
		name: name, arg: arg, usage: usage,
		set: func(c *Config, v string) error {
			v = strings.ToLower(strings.TrimSpace(v))
			for _, ch := range choices {
				if v == ch {
					*field(c) = ch
					return nil
				}
			}
			return errors.New(hint)
		},
		get: func(c *Config) string { return *field(c) },
	}
}

func redisURL(name, usage string, field func(*Config) *string) setting {
	s := text(name, "url", usage, field, checkRedisURL)
	s.show = func(v string) string { return strconv.Quote(redactURL(v)) }
	return s
}

// parseBool accepts true/false, yes/no and 1/0 in any case.
func parseBool(v string) (b, ok bool) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true", "yes", "1":
		return true, true
	case "false", "no", "0":
		return false, true
	}
	return false, false
}

// checkListenAddr accepts host:port with a numeric port 0–65535 and an
// optional host (empty means every interface), or "" when empty is allowed.
func checkListenAddr(emptyOK bool) func(string) error {
	hint := "use host:port, such as 127.0.0.1:6380"
	if emptyOK {
		hint += ", or an empty value to disable it"
	}
	return func(v string) error {
		if v == "" && emptyOK {
			return nil
		}
		if _, port, err := net.SplitHostPort(v); err != nil || !validPort(port, 0) {
			return errors.New(hint)
		}
		return nil
	}
}

func validPort(p string, lo int) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n >= lo && n <= 65535 && p[0] != '+'
}

// checkRedisURL accepts "" or redis://[user:password@]host[:port][/db],
// the same with rediss:// (TLS), and the Sentinel URLs of redisurl
// (redis-sentinel://[user:password@]host:port,.../master), which it parses
// the way the client will.
func checkRedisURL(v string) error {
	if v == "" {
		return nil
	}
	if redisurl.IsSentinel(v) {
		_, err := redisurl.Failover(v)
		return err
	}
	hint := errors.New("use a redis:// or rediss:// (TLS) URL, such as redis://:password@10.0.0.5:6379/0, or for Redis Sentinel a URL such as " + redisurl.Example)
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Opaque != "" || u.Hostname() == "" {
		return hint
	}
	if p := u.Port(); p != "" && !validPort(p, 1) {
		return hint
	}
	if db := strings.TrimPrefix(u.Path, "/"); db != "" {
		if n, err := strconv.Atoi(db); err != nil || n < 0 {
			return errors.New("the path of the URL is the database number: use /0, /1 and so on, or leave it out")
		}
	}
	return nil
}

// redactURL hides the passwords of a URL for error messages and logs: the
// one before the host, and the values of query parameters whose name
// holds "password" (sentinel_password).
func redactURL(v string) string {
	u, err := url.Parse(v)
	if err != nil {
		if strings.Contains(v, "@") || strings.Contains(strings.ToLower(v), "password") {
			return "[hidden: not a URL, may hold a password]"
		}
		return v
	}
	hidden := false
	q := u.Query()
	for name, vals := range q {
		if strings.Contains(strings.ToLower(name), "password") {
			for i := range vals {
				vals[i] = "xxxxx"
			}
			hidden = true
		}
	}
	if hidden {
		u.RawQuery = q.Encode()
	}
	if _, ok := u.User.Password(); !ok && !hidden {
		return v // nothing to hide; keep the text as the user wrote it
	}
	return u.Redacted()
}

// parseNodes splits a comma-separated host:port list; "" gives nil.
func parseNodes(v string) ([]string, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	var nodes []string
	for n := range strings.SplitSeq(v, ",") {
		n = strings.TrimSpace(n)
		host, port, err := net.SplitHostPort(n)
		if err != nil || host == "" || !validPort(port, 1) {
			return nil, errors.New("node " + strconv.Quote(n) + " is not host:port: use a comma-separated list such as 10.0.0.1:7000,10.0.0.2:7000")
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}
