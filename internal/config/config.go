package config

import (
	"github.com/bucketd/bucketd/internal/policy"

	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Config is bucketd's complete, validated configuration. Get one from Load
// (or Default, in tests) and a fresher one from Reload. The zero Config is
// not valid. A Config is a value, safe to read from many goroutines; do not
// modify its Policies map or StoreCluster slice, which copies share.
type Config struct {
	Addr            string        // Redis protocol listen address, host:port
	Shards          int           // 1..65536; the shard package rounds up to a power of two
	MaxKeyBytes     int           // >= 1
	MaxQueryBytes   int           // >= 1024
	MaxArgs         int           // >= 6
	ShutdownTimeout time.Duration // > 0
	LogLevel        slog.Level    // debug, info, warn or error; applies live on reload
	LogFormat       string        // "text" or "json"
	MetricsAddr     string        // HTTP listen address for /metrics; "" disables
	PProf           bool          // also serve net/http/pprof under /debug/pprof/ on MetricsAddr

	RequirePass   string        // "" means no password
	TLSCert       string        // PEM file; set together with TLSKey or not at all
	TLSKey        string        // PEM file
	TLSCACert     string        // PEM file of client CAs; needs TLSCert; turns on mutual TLS
	ProtectedMode bool          // with no RequirePass, refuse non-loopback clients
	MaxClients    int           // 0 means no limit
	IdleTimeout   time.Duration // 0 means never; else >= 1s
	// OutputBufferLimits bound the replies a client may make bucketd
	// hold, per class (client-output-buffer-limit).
	OutputBufferLimits OutputBufferLimits

	Replicate         string        // redis:// or rediss:// URL; "" disables
	ReplicatePrefix   string        // key prefix in the replicate Redis
	ReplicateQueue    int           // >= 1
	ReplicateInterval time.Duration // between collections of changed buckets, >= 1ms
	Store             string        // redis:// or rediss:// URL; "" means buckets live in memory
	StoreCluster      []string      // host:port seed nodes of a Redis Cluster; nil when unset
	RedisTimeout      time.Duration // > 0; bounds every reply from Redis
	OnRedisError      string        // "allow" or "deny"
	// Lease mode (store mode only): see docs/leases.md.
	Leases        bool
	LeaseTarget   time.Duration // >= 1ms
	LeaseMaxShare float64       // in (0, 1]
	LeaseTTL      time.Duration // >= 100ms and >= 4 x RedisTimeout

	MaxBuckets            int           // 0 means no limit
	DataDir               string        // directory for snapshots; "" disables them
	SnapshotInterval      time.Duration // >= 1s
	IgnoreCorruptSnapshot bool          // start empty instead of refusing a corrupt snapshot

	// ReloadAllowEmpty lets a reload apply a file that looks caught in the
	// middle of a rewrite (see Reload). Applies live on reload, so the
	// file itself may set it.
	ReloadAllowEmpty bool

	// SlowlogLogSlowerThan is the least time, in microseconds, a command
	// takes to enter SLOWLOG: 0 logs every command, -1 none. Applies live
	// on reload.
	SlowlogLogSlowerThan int
	// SlowlogMaxLen is how many SLOWLOG entries are kept, the newest;
	// 0..MaxSlowlogLen. Applies live on reload.
	SlowlogMaxLen int

	// Policies maps a policy name to its limits; empty (not nil) when the
	// file names none. Applies live on reload.
	Policies map[string]policy.Policy

	// File is the config file read, from --config or BUCKETD_CONFIG; ""
	// when there is none. A reload reads the same file.
	File string

	in      inputs
	sources map[string]string // setting name -> label of the source that set it last
	// fileCut reports that the file, as read, did not end with a newline:
	// a file being written may have been read up to the middle of a line.
	fileCut bool
}

// inputs are what Load fixes once and every Reload reuses.
type inputs struct {
	flags         map[string]string // raw flag values by setting name
	fileFrom      string            // "--config" or "BUCKETD_CONFIG"
	defaultShards int
}

// DefaultShards is the default of shards: two per GOMAXPROCS, within 1..65536.
func DefaultShards() int {
	return min(maxShards, max(1, 2*runtime.GOMAXPROCS(0)))
}

// Default returns the configuration bucketd runs with when no flag,
// environment variable or file says otherwise.
func Default() Config {
	return defaults(DefaultShards())
}

func defaults(shards int) Config {
	return Config{
		Addr:                 "127.0.0.1:6380",
		Shards:               shards,
		MaxKeyBytes:          1024,
		MaxQueryBytes:        64 << 20,
		MaxArgs:              1 << 20,
		ShutdownTimeout:      10 * time.Second,
		LogLevel:             slog.LevelInfo,
		SlowlogLogSlowerThan: 10000,
		SlowlogMaxLen:        128,
		LogFormat:            "text",
		MetricsAddr:          "127.0.0.1:9380",
		ProtectedMode:        true,
		MaxClients:           10000,
		OutputBufferLimits: OutputBufferLimits{
			Normal: OutputBufferLimit{HardBytes: 32 << 20, SoftBytes: 8 << 20, SoftSeconds: 60},
			PubSub: OutputBufferLimit{HardBytes: 32 << 20, SoftBytes: 8 << 20, SoftSeconds: 60},
		},
		ReplicatePrefix:   "tb:",
		ReplicateQueue:    1 << 16,
		ReplicateInterval: time.Second,
		RedisTimeout:      50 * time.Millisecond,
		OnRedisError:      "deny",
		LeaseTarget:       time.Second,
		LeaseMaxShare:     0.1,
		LeaseTTL:          2 * time.Second,
		SnapshotInterval:  time.Minute,
		Policies:          map[string]policy.Policy{},
		in:                inputs{defaultShards: shards},
	}
}

// Load parses args (without the program name), reads the environment
// through getenv (os.Getenv in production; nil means an empty environment)
// and the config file named by --config or BUCKETD_CONFIG, and returns the
// combined, validated Config. A flag wins over an environment variable, an
// environment variable over the file, the file over the default; an empty
// environment variable counts as unset.
//
// --help writes the usage to stderr and returns an error that is
// flag.ErrHelp. Flag syntax errors are also reported on stderr, by the flag
// package. All other errors name their source and say what to do.
func Load(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	if stderr == nil {
		stderr = io.Discard
	}
	in := inputs{flags: map[string]string{}, defaultShards: DefaultShards()}
	fs := flag.NewFlagSet("bucketd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { writeUsage(stderr, in.defaultShards) }
	record := func(name string) func(string) error {
		return func(v string) error { in.flags[name] = v; return nil }
	}
	fs.Func("config", "", record("config"))
	for _, s := range settings {
		if s.flag {
			fs.BoolFunc(s.name, s.usage, record(s.name))
		} else {
			fs.Func(s.name, s.usage, record(s.name))
		}
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		hint := ""
		if _, isBool := parseBool(fs.Arg(0)); isBool {
			hint = "; give a boolean flag its value with =, as in --protected-mode=false"
		}
		return Config{}, fmt.Errorf("unexpected argument %q: bucketd takes only flags (see --help)%s", fs.Arg(0), hint)
	}

	c := Config{in: in}
	if p, ok := in.flags["config"]; ok {
		if p == "" {
			return Config{}, errors.New(`--config "": give the path of a YAML config file, or leave the flag out`)
		}
		c.File, c.in.fileFrom = p, "--config"
		delete(c.in.flags, "config")
	} else if p := getenv("BUCKETD_CONFIG"); p != "" {
		c.File, c.in.fileFrom = p, "BUCKETD_CONFIG"
	}
	return c.load(getenv)
}

// Reload reads the config file and the environment again, keeping the
// flags and the file path Load saw, and validates the result as Load does.
//
// On success it returns the Config now in effect: Policies and LogLevel as
// the sources now say (they apply live), and every other setting unchanged
// from c, because those take effect only at a restart. restart lists, in
// --help order, the names of those other settings whose sources now differ
// from c, so the caller can log that a restart is needed; the returned
// Config can be reloaded again and reports them again until the restart.
//
// A file that may have been read in the middle of a rewrite (truncated,
// then written: `cat new > bucketd.yaml`, an editor that saves in place)
// is refused when applying it would remove any of c's policies: one that
// names no policy (empty so far, or cut before its first policy), or one
// whose last line has no newline (cut in the middle of a line). Otherwise
// a reload racing a rewrite would replace the policies with none or with
// a few, and every call naming the others would fail until the next
// reload. ReloadAllowEmpty, from any source including that file, lets such
// a file through. A file cut at the end of a line that still names a
// policy is not told apart from one written that way on purpose: the
// remedy is to write the file atomically, to a temporary name renamed
// over it.
//
// On error (an unreadable or invalid file, an invalid environment
// variable, a file refused as above) it returns c unchanged and the error;
// the caller keeps running with c. Pass the same getenv as to Load.
func (c Config) Reload(getenv func(string) string) (next Config, restart []string, err error) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	n, err := c.load(getenv)
	if err == nil {
		err = c.checkRewrite(n)
	}
	if err != nil {
		return c, nil, err
	}
	for i := range settings {
		s := &settings[i]
		if !s.live && s.get(&c) != s.get(&n) {
			restart = append(restart, s.name)
		}
	}
	next = c
	next.LogLevel = n.LogLevel
	next.Policies = n.Policies
	next.ReloadAllowEmpty = n.ReloadAllowEmpty
	next.SlowlogLogSlowerThan, next.SlowlogMaxLen = n.SlowlogLogSlowerThan, n.SlowlogMaxLen
	next.sources = maps.Clone(c.sources)
	if next.sources == nil {
		next.sources = map[string]string{}
	}
	for _, name := range []string{"log-level", "policies", "reload-allow-empty", "slowlog-log-slower-than", "slowlog-max-len"} {
		if v, ok := n.sources[name]; ok {
			next.sources[name] = v
		} else {
			delete(next.sources, name)
		}
	}
	return next, restart, nil
}

// checkRewrite refuses next, read by a reload of c, when its file may be
// one caught in the middle of a rewrite and applying it would remove
// policies of c (see Reload).
func (c Config) checkRewrite(next Config) error {
	if next.ReloadAllowEmpty {
		return nil
	}
	var removed []string
	for _, name := range slices.Sorted(maps.Keys(c.Policies)) {
		if _, ok := next.Policies[name]; !ok {
			removed = append(removed, name)
		}
	}
	var why string
	switch {
	case len(removed) == 0:
		return nil
	case len(next.Policies) == 0:
		why = "names no policies"
	case next.fileCut:
		why = "does not end with a newline (it may have been read in the middle of a line)"
	default:
		return nil
	}
	return fmt.Errorf("config file %s %s, and applying it would remove the policies in force %s: "+
		"a file read in the middle of a rewrite looks like this; "+
		"write the file under a temporary name and rename it over %s (docs/configuration.md#write-the-file-atomically), "+
		"or, to apply such a file on purpose, put reload-allow-empty: true in it or start bucketd with --reload-allow-empty",
		c.File, why, names(removed), c.File)
}

// names lists policy names for a message, the first ten of them.
func names(list []string) string {
	if len(list) > 10 {
		return strings.Join(list[:10], ", ") + fmt.Sprintf(" and %d more", len(list)-10)
	}
	return strings.Join(list, ", ")
}

// load builds a Config from the defaults, c.File, getenv and c.in.flags.
func (c Config) load(getenv func(string) string) (Config, error) {
	shards := c.in.defaultShards
	if shards == 0 {
		shards = DefaultShards()
	}
	n := defaults(shards)
	n.in = c.in
	n.in.defaultShards = shards
	n.File = c.File
	n.sources = map[string]string{}

	if n.File != "" {
		f, err := readFile(n.File, n.in.fileFrom)
		if err != nil {
			return Config{}, err
		}
		for _, e := range f.values {
			s := byName[e.key]
			if err := s.set(&n, e.value); err != nil {
				return Config{}, fmt.Errorf("%s:%d: %s %s: %w", n.File, e.line, e.key, s.quote(e.value), err)
			}
			n.sources[e.key] = fmt.Sprintf("%s:%d", n.File, e.line)
		}
		if f.policies != nil {
			n.Policies = f.policies
			n.sources["policies"] = fmt.Sprintf("%s:%d", n.File, f.policiesLine)
		}
		n.fileCut = f.cut
	}
	for i := range settings {
		s := &settings[i]
		env := envName(s.name)
		if v := getenv(env); v != "" {
			if err := s.set(&n, v); err != nil {
				return Config{}, fmt.Errorf("%s=%s: %w", env, s.quote(v), err)
			}
			n.sources[s.name] = env
		}
	}
	for i := range settings {
		s := &settings[i]
		if v, ok := n.in.flags[s.name]; ok {
			if err := s.set(&n, v); err != nil {
				return Config{}, fmt.Errorf("--%s %s: %w", s.name, s.quote(v), err)
			}
			n.sources[s.name] = "--" + s.name
		}
	}
	if err := n.check(); err != nil {
		return Config{}, err
	}
	return n, nil
}

func (s *setting) quote(v string) string {
	if s.show != nil {
		return s.show(v)
	}
	return strconv.Quote(v)
}

// from names a setting together with the source of its value, for errors
// about settings that do not go together. A value set in code (on a Config
// from Default) has no source and is named alone.
func (c *Config) from(name string) string {
	if src, ok := c.sources[name]; ok {
		return name + " (from " + src + ")"
	}
	return name
}

// check validates the settings that depend on each other.
func (c *Config) check() error {
	switch {
	case c.TLSCert != "" && c.TLSKey == "":
		return fmt.Errorf("%s needs tls-key too: give the certificate's private key, or drop tls-cert", c.from("tls-cert"))
	case c.TLSKey != "" && c.TLSCert == "":
		return fmt.Errorf("%s needs tls-cert too: give the certificate of the key, or drop tls-key", c.from("tls-key"))
	case c.TLSCACert != "" && c.TLSCert == "":
		return fmt.Errorf("%s needs tls-cert and tls-key: mutual TLS needs the server's own certificate as well", c.from("tls-ca-cert"))
	case c.Store != "" && len(c.StoreCluster) > 0:
		return fmt.Errorf("%s and %s cannot both be set: use store for a standalone Redis, store-cluster for a Redis Cluster",
			c.from("store"), c.from("store-cluster"))
	case c.Replicate != "" && c.Store != "":
		return fmt.Errorf("%s cannot be combined with %s: in store mode Redis already holds the buckets; drop one of them",
			c.from("replicate"), c.from("store"))
	case c.Replicate != "" && len(c.StoreCluster) > 0:
		return fmt.Errorf("%s cannot be combined with %s: in store mode Redis already holds the buckets; drop one of them",
			c.from("replicate"), c.from("store-cluster"))
	case c.PProf && c.MetricsAddr == "":
		return fmt.Errorf("%s needs metrics-addr: the profiles are served by the metrics server; give --metrics-addr host:port, or drop pprof",
			c.from("pprof"))
	case c.Leases && !c.StoreMode():
		return fmt.Errorf("%s needs store mode: leases are of buckets Redis keeps; give --store or --store-cluster, or drop leases", c.from("leases"))
	case c.Leases && c.LeaseTTL < 4*c.RedisTimeout:
		return fmt.Errorf("%s must be at least four times redis-timeout (%s): an instance stops spending a lease a quarter of lease-ttl after it asked, so a reply that takes redis-timeout must leave some of it", c.from("lease-ttl"), c.RedisTimeout)
	case c.StoreMode() && (c.DataDir != "" || c.MaxBuckets > 0):
		return errors.New("--data-dir and --max-buckets apply to buckets kept in memory; in store mode (--store, --store-cluster) Redis keeps them: drop those flags")
	}
	_, err := c.TLSConfig()
	return err
}

// MinPasswordLength is the shortest requirepass bucketd accepts without a
// warning on a port beyond loopback: Redis clients may try passwords as
// fast as the network carries them, and nothing slows failed attempts, so
// only a long random password (openssl rand -hex 24 gives 48 characters)
// stands. docs/operations.md documents it.
const MinPasswordLength = 16

// placeholderPasswords are the passwords of bucketd's own examples and
// deploy files (deploy/systemd/bucketd.env, the Kubernetes Secrets, the
// docs), compared without regard to case: a deployment that kept one is
// open to anyone who has read them.
var placeholderPasswords = []string{"change-me", "changeme", "s3cret"}

// WeakPassword says why RequirePass is too weak to guard a port that
// clients beyond loopback can reach: "placeholder" when it is one of the
// examples' passwords, "short" when it has fewer than MinPasswordLength
// characters, and "" otherwise, or when no password is set (the caller
// warns about that on its own). It never returns the password.
func (c Config) WeakPassword() string {
	switch {
	case c.RequirePass == "":
		return ""
	case slices.ContainsFunc(placeholderPasswords, func(p string) bool { return strings.EqualFold(p, c.RequirePass) }):
		return "placeholder"
	case utf8.RuneCountInString(c.RequirePass) < MinPasswordLength:
		return "short"
	}
	return ""
}

// StoreMode reports whether Redis keeps the buckets (--store or
// --store-cluster) instead of bucketd's memory.
func (c Config) StoreMode() bool { return c.Store != "" || len(c.StoreCluster) > 0 }

// TLSConfig loads the certificate files and returns a server tls.Config for
// the client port: TLS 1.2 or later, and, when TLSCACert is set, a client
// certificate signed by one of its CAs required. It returns nil and no error
// when TLS is off (TLSCert is empty). Every call reads the files again.
func (c Config) TLSConfig() (*tls.Config, error) {
	if c.TLSCert == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("%s and %s: %w: give a PEM certificate and its matching PEM private key",
			c.from("tls-cert"), c.from("tls-key"), err)
	}
	tc := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
	}
	if c.TLSCACert != "" {
		pem, err := os.ReadFile(c.TLSCACert)
		if err != nil {
			return nil, fmt.Errorf("%s: %w: give a readable PEM file of CA certificates", c.from("tls-ca-cert"), err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no PEM certificate in %q: give a PEM file of CA certificates (-----BEGIN CERTIFICATE-----)",
				c.from("tls-ca-cert"), c.TLSCACert)
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}
