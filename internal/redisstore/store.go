package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/info"
	"github.com/bucketd/bucketd/internal/lease"
	"github.com/bucketd/bucketd/internal/ratelog"
	"github.com/bucketd/bucketd/internal/redisscript"
	"github.com/bucketd/bucketd/internal/redisurl"
)

// Defaults of Config.
const (
	DefaultTimeout   = 50 * time.Millisecond
	DefaultMaxBatch  = 256
	DefaultPipelines = 4
)

// Config sets up a Store. Zero values pick the defaults.
type Config struct {
	// Client talks to Redis: a *redis.Client (standalone) or a
	// *redis.ClusterClient (Redis Cluster). The caller builds it, and closes
	// it after Store.Close. It must be created with MaxRetries: -1 and
	// ContextTimeoutEnabled: true (ClientOptions and ClusterClientOptions
	// set both): with retries on, go-redis could send a timed-out script
	// call again and Redis would count it twice; without context timeouts
	// a stalled Redis would hold connections for the client's ReadTimeout.
	// New refuses a client without them.
	Client redis.UniversalClient
	// Prefix is prepended to every key (e.g. "tb:"). A key keeps its
	// {hash tag}: with the prefix "tb:", "{user1}:a" is stored as
	// "tb:{user1}:a", which Redis Cluster hashes on "user1".
	Prefix string
	// Timeout bounds every reply, from Caller.Run to the answer, including
	// the wait for a free pipeline (50 ms).
	Timeout time.Duration
	// FailOpen says what TB.ACQUIRE and TB.PEEK answer when Redis does not
	// answer within Timeout or answers with an error: allowed (true) or
	// denied (false, the default). See FailOpenDecision and
	// FailClosedDecision. TB.RESET gets an error reply either way.
	FailOpen bool
	// MaxBatch is how many operations the dispatcher gathers into one
	// pipeline (256). One connection's operations (on a cluster, those for
	// one master) are never split, so a single Run with more operations
	// than this travels as one pipeline.
	MaxBatch int
	// Pipelines is how many pipelines may be in flight at once (4); on a
	// cluster, to each master.
	Pipelines int
	// Logger receives Redis errors, at most one line per second (with the
	// number of lines suppressed since the last one). Default slog.Default().
	Logger *slog.Logger

	// Leases is lease mode (internal/leasestore in front of this store):
	// decide.Lease requests go to the script's lease op, and TB.RESET is
	// the script's reset op, which keeps the lease records still live
	// (a DEL would let the bucket grant again the tokens instances hold).
	// Acquires, peeks and groups need nothing: the script honours records
	// on every key. Setting Instance sets Leases.
	Leases bool
	// Instance is this bucketd instance's lease id, unique among the
	// instances sharing the Redis: a lease call's record is the hash field
	// l:<Instance>-<generation> (lease.Request.Gen). Required with Leases.
	Instance string
	// LeaseTTL is how long Redis keeps a lease record after the call that
	// last renewed it: lease.Policy.TTL of the instances (a crashed
	// instance's lease comes back after it). It must not be shorter than
	// what the instances spend within (their TTL less their margin).
	// Default: lease.DefaultPolicy.TTL.
	LeaseTTL time.Duration
}

// maxLeaseTTL bounds Config.LeaseTTL: a record outlives its last call by
// at most a day.
const maxLeaseTTL = 24 * time.Hour

// ErrClosed is returned by Caller.Run after Close.
var ErrClosed = errors.New("redisstore: store closed")

// FailOpenDecision is what TB.ACQUIRE and TB.PEEK answer with Config.FailOpen
// set when Redis cannot answer: allowed, with the other three numbers 0
// (WITHINFO replies 1 0 0 0). No tokens were counted anywhere.
func FailOpenDecision() bucket.Decision { return bucket.Decision{Allowed: true} }

// FailClosedDecision is what TB.ACQUIRE and TB.PEEK answer by default when
// Redis cannot answer within timeout: denied, with retry_after_ms = timeout
// in milliseconds rounded up, at least 1 (WITHINFO replies 0 0 <ms> 0).
func FailClosedDecision(timeout time.Duration) bucket.Decision {
	ms := int64(math.Ceil(float64(timeout) / float64(time.Millisecond)))
	return bucket.Decision{RetryAfterMs: max(ms, 1)}
}

// Store is the Redis store: a decide.Limiter whose decisions Redis makes. Safe
// for concurrent use. Close stops its goroutines.
type Store struct {
	cfg     Config
	client  redis.UniversalClient
	cluster *redis.ClusterClient // nil for a standalone Redis
	perCall int                  // calls per script command (redisscript.KeysPerCall)
	log     *slog.Logger
	fail    decide.Answer // the policy's answer to acquire and peek
	grace   time.Duration // how long after the deadline the timer steps in

	// mu guards closed and lanes: held shared while a Run routes its
	// operations and queues them, exclusively to close a lane's queue
	// (Close, an idle cluster lane retiring) or to add a lane.
	mu     sync.RWMutex
	closed bool
	single *lane            // standalone: the only lane
	lanes  map[string]*lane // cluster: a lane per master address
	wg     sync.WaitGroup
	// stopped is canceled by Close: the key count in flight stops and its
	// goroutine ends.
	stopped context.Context
	stop    context.CancelFunc

	// Cluster: slotsKnown says go-redis holds the slot map, so routing a
	// key does no I/O; slotsLearned is closed then. learn asks the
	// maintenance goroutine to load the map; lastReload (nanoseconds since
	// epoch) rate-limits reloads after a master failed.
	slotsKnown   atomic.Bool
	slotsLearned chan struct{}
	learn        chan struct{}
	lastReload   atomic.Int64
	laneIdle     time.Duration // laneIdle, or shorter in tests

	allowed, denied, peeks, resets atomic.Int64
	errs, degraded, scriptLoads    atomic.Int64
	kinds                          errorCounts // errs and degraded by kind (counters.go)

	buckets     atomic.Int64
	epoch       time.Time
	lastRefresh atomic.Int64 // nanoseconds since epoch of the last DBSIZE request; -1 never
	refresh     chan struct{}

	errLog ratelog.Gate
}

var _ decide.Limiter = (*Store)(nil)

// New checks cfg, fills in defaults and starts the dispatcher, the workers
// and the goroutine that refreshes the key count. It does not talk to Redis;
// LoadScript does, and bucketd calls it at start.
func New(cfg Config) (*Store, error) {
	var cluster *redis.ClusterClient
	switch c := cfg.Client.(type) {
	case *redis.Client:
		if o := c.Options(); o.MaxRetries > 0 || !o.ContextTimeoutEnabled {
			return nil, fmt.Errorf("redisstore: the Redis client must be created with MaxRetries: -1 and ContextTimeoutEnabled: true (it has MaxRetries %d, ContextTimeoutEnabled %v); see ClientOptions",
				o.MaxRetries, o.ContextTimeoutEnabled)
		}
	case *redis.ClusterClient:
		if o := c.Options(); o.MaxRetries > 0 || !o.ContextTimeoutEnabled {
			return nil, fmt.Errorf("redisstore: the Redis Cluster client must be created with MaxRetries: -1 and ContextTimeoutEnabled: true (it has MaxRetries %d, ContextTimeoutEnabled %v); see ClusterClientOptions",
				o.MaxRetries, o.ContextTimeoutEnabled)
		}
		cluster = c
	case nil:
		return nil, errors.New("redisstore: Config.Client is required")
	default:
		return nil, fmt.Errorf("redisstore: Config.Client must be a *redis.Client or a *redis.ClusterClient, not %T", cfg.Client)
	}
	if cfg.Leases && cfg.Instance == "" {
		return nil, errors.New("redisstore: Config.Leases needs Config.Instance, the instance's lease id")
	}
	if cfg.LeaseTTL < 0 || cfg.LeaseTTL > maxLeaseTTL {
		return nil, fmt.Errorf("redisstore: Config.LeaseTTL %v is out of range (0: the default, up to %v)", cfg.LeaseTTL, maxLeaseTTL)
	}
	return newStore(cfg, cluster), nil
}

// newStore is New without the checks of the client (tests use it to show
// what a client that ignores contexts would do).
func newStore(cfg Config, cluster *redis.ClusterClient) *Store {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.Pipelines <= 0 {
		cfg.Pipelines = DefaultPipelines
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = time.Duration(lease.DefaultPolicy.TTL) * time.Microsecond
	}
	cfg.Leases = cfg.Leases || cfg.Instance != ""
	s := &Store{
		cfg:      cfg,
		client:   cfg.Client,
		cluster:  cluster,
		perCall:  redisscript.KeysPerCall(cfg.Client),
		log:      cfg.Logger,
		grace:    max(cfg.Timeout/4, time.Millisecond),
		laneIdle: laneIdle,
		epoch:    time.Now(),
		refresh:  make(chan struct{}, 1),
		learn:    make(chan struct{}, 1),
		// closed once the slot map is known; a standalone Redis has none
		slotsLearned: make(chan struct{}),
	}
	if cfg.FailOpen {
		s.fail.Decision = FailOpenDecision()
	} else {
		s.fail.Decision = FailClosedDecision(cfg.Timeout)
	}
	s.stopped, s.stop = context.WithCancel(context.Background())
	s.lastRefresh.Store(-1)
	s.lastReload.Store(-int64(time.Second))
	if cluster == nil {
		s.single = newLane(s, "")
	} else {
		s.lanes = make(map[string]*lane)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.maintain()
	}()
	return s
}

// ClientOptions parses a redis:// or rediss:// URL (password and database
// in it, as redis.ParseURL reads them) into options New accepts:
// MaxRetries -1 and ContextTimeoutEnabled true. It also sets DialerRetries
// to 1, so that a refused connection fails at once instead of retrying
// until the timeout (the answer is the policy's either way).
func ClientOptions(url string) (*redis.Options, error) {
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	o.MaxRetries = -1
	o.ContextTimeoutEnabled = true
	o.DialerRetries = 1
	return o, nil
}

// FailoverOptions parses a redis-sentinel:// URL (the Sentinels and the
// master's name; see redisurl) into options for redis.NewFailoverClient,
// set like ClientOptions; New accepts the client. Through a failover its
// calls fail (the policy answers) until the Sentinels name the new master,
// and the client's next connections go there.
func FailoverOptions(url string) (*redis.FailoverOptions, error) {
	o, err := redisurl.Failover(url)
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	o.MaxRetries = -1
	o.ContextTimeoutEnabled = true
	o.DialerRetries = 1
	return o, nil
}

// ClusterClientOptions returns options New accepts for a Redis Cluster
// reached through the seed nodes addrs (host:port), set like ClientOptions.
// Set Password, Username or TLSConfig on the result as the cluster needs.
func ClusterClientOptions(addrs []string) *redis.ClusterOptions {
	return &redis.ClusterOptions{
		Addrs:                 addrs,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		DialerRetries:         1,
	}
}

// LoadScript loads the script into Redis (SCRIPT LOAD; on every master of a
// cluster). It also opens connections and, for a cluster, learns the slot
// map, so that the first requests do not pay for that within their
// timeout. Not required: a Redis without the script answers NOSCRIPT, and
// the store loads it then. Bound ctx: a Redis that is down makes it fail.
func (s *Store) LoadScript(ctx context.Context) error {
	if err := redisscript.Load(ctx, s.client); err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	if s.cluster != nil {
		s.slotsKnownNow() // loading the script on every master loaded the map
	}
	return nil
}

// NewCaller returns a Caller for one connection.
func (s *Store) NewCaller() decide.Caller {
	return &Caller{s: s, done: make(chan struct{}, 1)}
}

// Stats returns the store's counters. Allowed and Denied count the answers
// clients got, including those of the fail-open or fail-closed policy
// (Degraded counts those separately); Resets counts keys TB.RESET deleted.
// Buckets is the number of keys in the Redis database (DBSIZE; for a
// cluster the sum over its masters), all keys and not only bucketd's,
// refreshed in the background at most once a second: calling Stats asks for
// a refresh and returns the last count. QueueDepth is the number of
// connections' parts (their operations for one Redis server) that wait for
// a dispatcher.
func (s *Store) Stats() decide.Stats {
	now := time.Since(s.epoch).Nanoseconds()
	if last := s.lastRefresh.Load(); last < 0 || now-last >= int64(time.Second) {
		select {
		case s.refresh <- struct{}{}:
		default: // a refresh is pending already
		}
	}
	return decide.Stats{
		Buckets:    s.buckets.Load(),
		Allowed:    s.allowed.Load(),
		Denied:     s.denied.Load(),
		Peeks:      s.peeks.Load(),
		Resets:     s.resets.Load(),
		QueueDepth: s.queueDepth(),
	}
}

// queueDepth sums the lanes' queues.
func (s *Store) queueDepth() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.single != nil {
		return int64(len(s.single.queue))
	}
	n := 0
	for _, l := range s.lanes {
		n += len(l.queue)
	}
	return int64(n)
}

// Errors returns how many Redis commands failed: an error reply (other
// than NOSCRIPT, which is handled, and WRONGTYPE, which is the client's
// answer), a transport error, or no answer within the timeout (including
// operations that waited that long for a free pipeline and were never
// sent), plus failed key counts (DBSIZE).
func (s *Store) Errors() int64 { return s.errs.Load() }

// Degraded returns how many TB.ACQUIRE and TB.PEEK answers came from the
// fail-open or fail-closed policy instead of Redis.
func (s *Store) Degraded() int64 { return s.degraded.Load() }

// ScriptLoads returns how many times the store sent the script itself
// (EVAL) after a NOSCRIPT reply: about once per Redis node after a restart
// or failover.
func (s *Store) ScriptLoads() int64 { return s.scriptLoads.Load() }

// Info returns the "# Store" section of INFO.
func (s *Store) Info() info.Section {
	policy := "deny"
	if s.cfg.FailOpen {
		policy = "allow"
	}
	return info.Section{Title: "Store", Fields: []info.Field{
		info.Text("bucketd_mode", "store"),
		info.Text("store_prefix", s.cfg.Prefix),
		info.Int("store_timeout_ms", s.cfg.Timeout.Milliseconds()),
		info.Text("store_on_redis_error", policy),
		info.Int("store_redis_errors_total", s.Errors()),
		info.Int("store_degraded_decisions_total", s.Degraded()),
		info.Int("store_script_loads_total", s.ScriptLoads()),
	}}
}

// Close stops taking operations, lets the queued ones be answered (each
// within its timeout), and stops the store's goroutines. Caller.Run then
// returns ErrClosed. It does not close Config.Client.
func (s *Store) Close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		if s.single != nil {
			close(s.single.queue)
		}
		for _, l := range s.lanes {
			close(l.queue)
		}
		s.stop()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// maintain refreshes the key count when Stats asks, at most once a second,
// and learns a cluster's slot map when a Run finds it unknown.
func (s *Store) maintain() {
	for {
		select {
		case <-s.stopped.Done():
			return
		case <-s.refresh:
			s.countKeys()
		case <-s.learn:
			if !s.slotsKnown.Load() && !s.learnSlotMap() {
				select {
				case <-s.stopped.Done():
					return
				case <-time.After(learnPause): // do not ask a cluster that is down in a loop
				}
			}
		}
	}
}

// countKeys refreshes the key count.
func (s *Store) countKeys() {
	s.lastRefresh.Store(time.Since(s.epoch).Nanoseconds())
	n, err := s.dbsize()
	if s.stopped.Err() != nil {
		return
	}
	if err != nil {
		s.countError(err)
		s.logError("counting keys (DBSIZE) failed", err, 1, "")
		return
	}
	s.buckets.Store(n)
}

// dbsizeTimeout bounds one key count; nobody waits for it.
const dbsizeTimeout = time.Second

func (s *Store) dbsize() (int64, error) {
	ctx, cancel := context.WithTimeout(s.stopped, max(dbsizeTimeout, s.cfg.Timeout))
	defer cancel()
	if s.cluster == nil {
		return s.client.DBSize(ctx).Result()
	}
	var sum atomic.Int64
	err := s.cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		n, err := c.DBSize(ctx).Result()
		sum.Add(n)
		return err
	})
	return sum.Load(), err
}

// logError logs a Redis failure affecting ops operations, at most once per
// second; the lines left out in between are counted in the next one. node
// is the cluster master concerned (logged as node=host:port), "" for a
// standalone Redis or none in particular.
func (s *Store) logError(msg string, err error, ops int, node string) {
	suppressed, ok := s.errLog.Allow(time.Now())
	if !ok {
		return
	}
	policy := "deny"
	if s.cfg.FailOpen {
		policy = "allow"
	}
	args := []any{"err", err, "ops", ops, "on_redis_error", policy,
		"errors_total", s.errs.Load(), "suppressed_lines", suppressed}
	if node != "" {
		args = append(args, "node", node)
	}
	s.log.Warn("redis store: "+msg, args...)
}
