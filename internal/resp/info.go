package resp

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/gcfloor"
	"github.com/bucketd/bucketd/internal/info"
)

// info builds the INFO reply for the requested sections (none, "all",
// "default" or "everything" means every section). A section is built only
// when asked for: Memory stops the world to read the heap.
func (s *Server) info(requested [][]byte) []byte {
	st := s.cfg.Limiter.Stats()
	var b []byte
	add := func(sec info.Section) {
		if len(b) > 0 {
			b = append(b, '\r', '\n')
		}
		b = info.Append(b, sec)
	}
	for _, sec := range [...]struct {
		title string
		build func(*Server, decide.Stats) info.Section
	}{
		{"Server", (*Server).infoServer},
		{"Clients", (*Server).infoClients},
		{"Memory", (*Server).infoMemory},
		{"Stats", (*Server).infoStats},
		{"Bucketd", (*Server).infoBucketd},
		{"Policies", (*Server).infoPolicies},
	} {
		if wantSection(requested, sec.title) {
			add(sec.build(s, st))
		}
	}
	replication := replicationSection()
	var others []info.Section
	for _, section := range s.cfg.Info { // replication, the Redis store
		sec := section()
		if sec.Title == replication.Title {
			replication.Fields = append(replication.Fields, sec.Fields...)
		} else {
			others = append(others, sec)
		}
	}
	for _, sec := range append([]info.Section{replication}, others...) {
		if wantSection(requested, sec.Title) {
			add(sec)
		}
	}
	if wantSection(requested, "Keyspace") {
		add(infoKeyspace(st))
	}
	return b
}

// wantSection reports whether the INFO arguments ask for the section title.
func wantSection(requested [][]byte, title string) bool {
	if len(requested) == 0 {
		return true
	}
	upper := strings.ToUpper(title)
	for _, r := range requested {
		if equalFold(r, upper) || equalFold(r, "ALL") || equalFold(r, "DEFAULT") || equalFold(r, "EVERYTHING") {
			return true
		}
	}
	return false
}

func (s *Server) infoServer(decide.Stats) info.Section {
	uptime := time.Since(s.started)
	f := []info.Field{
		info.Text("redis_version", "7.2.0"),
		info.Text("bucketd_version", s.cfg.Version),
		info.Text("redis_mode", "standalone"),
		info.Text("os", runtime.GOOS),
		info.Int("arch_bits", strconv.IntSize),
		info.Text("go_version", runtime.Version()),
		info.Int("process_id", int64(os.Getpid())),
	}
	if addr := s.Addr(); addr != nil {
		f = append(f, info.Text("tcp_addr", addr.String()))
	}
	f = append(f,
		info.Int("uptime_in_seconds", int64(uptime/time.Second)),
		info.Int("uptime_in_days", int64(uptime/(24*time.Hour))),
		info.Int("gomaxprocs", int64(runtime.GOMAXPROCS(0))),
	)
	return info.Section{Title: "Server", Fields: f}
}

func (s *Server) infoClients(decide.Stats) info.Section {
	return info.Section{Title: "Clients", Fields: []info.Field{
		info.Int("connected_clients", s.n.connected.Load()),
		info.Int("blocked_clients", 0),
	}}
}

// infoMemory reports the Go heap without the GC ballast (never touched, so
// not data) plus the bucket tables, which are mapped outside the heap.
func (s *Server) infoMemory(st decide.Stats) info.Section {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	tables := st.TableBytes
	heap := int64(ms.HeapAlloc) - gcfloor.Bytes()
	return info.Section{Title: "Memory", Fields: []info.Field{
		info.Int("used_memory", heap+tables),
		info.Int("used_memory_heap", heap),
		info.Int("used_memory_tables", tables),
		info.Int("used_memory_sys", int64(ms.Sys)+tables),
		info.Int("maxmemory", 0),
		info.Text("mem_allocator", "go"),
	}}
}

func (s *Server) infoStats(st decide.Stats) info.Section {
	sv := s.Stats()
	var errs int64
	for _, n := range sv.Errors {
		errs += n
	}
	return info.Section{Title: "Stats", Fields: []info.Field{
		info.Int("total_connections_received", sv.TotalConnections),
		info.Int("rejected_connections", sv.RejectedConnections),
		info.Int("total_commands_processed", sv.TotalCommands),
		info.Int("total_error_replies", errs),
		info.Int("protocol_errors", sv.Errors[ErrProtocol]),
		info.Int("unknown_commands", sv.Errors[ErrUnknownCmd]),
		info.Int("expired_keys", st.Expired),
	}}
}

func (s *Server) infoBucketd(st decide.Stats) info.Section {
	return info.Section{Title: "Bucketd", Fields: []info.Field{
		info.Int("buckets", st.Buckets),
		info.Int("acquire_allowed_total", st.Allowed),
		info.Int("acquire_denied_total", st.Denied),
		info.Int("peek_total", st.Peeks),
		info.Int("reset_removed_total", st.Resets),
		info.Int("expired_total", st.Expired),
		info.Int("evicted_total", st.Evicted),
		info.Int("shards", st.Shards),
		info.Int("shard_queue_depth", st.QueueDepth),
	}}
}

// infoPolicies shows the policies in force, in name order, with the
// decisions counted under each since the start (a reload keeps the counts
// of the policies it keeps): policy_<name>:limits=2,shadow=0,allowed=…
func (s *Server) infoPolicies(decide.Stats) info.Section {
	stats := s.policyStats()[1:] // [0]: explicit limits, which the # Bucketd totals cover
	f := make([]info.Field, 0, 1+len(stats))
	f = append(f, info.Int("policies", int64(len(stats))))
	for _, p := range stats {
		f = append(f, info.Text("policy_"+p.Name, "limits="+strconv.Itoa(p.Limits)+
			",shadow="+strconv.Itoa(boolInt(p.Shadow))+
			",allowed="+strconv.FormatInt(p.Allowed, 10)+
			",denied="+strconv.FormatInt(p.Denied, 10)+
			",shadow_denied="+strconv.FormatInt(p.ShadowDenied, 10)))
	}
	return info.Section{Title: "Policies", Fields: f}
}

// replicationSection starts the "# Replication" section with the fields
// Redis puts first, which clients read: valkey-glide connects only to a
// server that says role:master. bucketd is always a master with no
// replicas; in replicate mode its own replication fields follow these, in
// the same section.
func replicationSection() info.Section {
	return info.Section{Title: "Replication", Fields: []info.Field{
		info.Text("role", "master"),
		info.Int("connected_slaves", 0),
	}}
}

// infoKeyspace shows the buckets as Redis shows database 0's keys; every
// bucket expires once it has refilled.
func infoKeyspace(st decide.Stats) info.Section {
	sec := info.Section{Title: "Keyspace"}
	if st.Buckets > 0 {
		n := strconv.FormatInt(st.Buckets, 10)
		sec.Fields = []info.Field{info.Text("db0", "keys="+n+",expires="+n+",avg_ttl=0")}
	}
	return sec
}
