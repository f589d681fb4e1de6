package command

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/gcfloor"
	"github.com/bucketd/bucketd/internal/info"
	"github.com/bucketd/bucketd/internal/resp"
	"github.com/bucketd/bucketd/internal/resp/wire"
)

// info builds the INFO reply for the requested sections (none, "all",
// "default" or "everything" means every section). A section is built only
// when asked for: Memory stops the world to read the heap.
func (e *Engine) info(s *session, requested [][]byte) []byte {
	v := infoView{e: e, srv: s.c.Server(), st: e.cfg.Limiter.Stats()}
	var b []byte
	add := func(sec info.Section) {
		if len(b) > 0 {
			b = append(b, '\r', '\n')
		}
		b = info.Append(b, sec)
	}
	for _, sec := range [...]struct {
		title string
		build func(infoView) info.Section
	}{
		{"Server", infoView.server},
		{"Clients", infoView.clients},
		{"Memory", infoView.memory},
		{"Stats", infoView.stats},
		{"Bucketd", infoView.bucketd},
		{"Policies", infoView.policies},
	} {
		if wantSection(requested, sec.title) {
			add(sec.build(v))
		}
	}
	replication := replicationSection()
	var others []info.Section
	for _, section := range e.cfg.Info { // replication, the Redis store
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
		add(infoKeyspace(v.st))
	}
	if wantExtra(requested, "Commandstats") {
		add(e.commandStats())
	}
	if wantExtra(requested, "Latencystats") {
		add(e.latencyStats())
	}
	return b
}

// infoView is what the sections are built from: the command layer, the
// connection server, and the store's counters read once per INFO.
type infoView struct {
	e   *Engine
	srv *resp.Server
	st  decide.Stats
}

// wantSection reports whether the INFO arguments ask for the section title.
func wantSection(requested [][]byte, title string) bool {
	if len(requested) == 0 {
		return true
	}
	upper := strings.ToUpper(title)
	for _, r := range requested {
		if wire.EqualFold(r, upper) || wire.EqualFold(r, "ALL") || wire.EqualFold(r, "DEFAULT") || wire.EqualFold(r, "EVERYTHING") {
			return true
		}
	}
	return false
}

// wantExtra reports whether the INFO arguments ask for a section that, as
// in Redis, INFO and INFO default leave out: named, or all or everything.
func wantExtra(requested [][]byte, title string) bool {
	upper := strings.ToUpper(title)
	for _, r := range requested {
		if wire.EqualFold(r, upper) || wire.EqualFold(r, "ALL") || wire.EqualFold(r, "EVERYTHING") {
			return true
		}
	}
	return false
}

func (v infoView) server() info.Section {
	uptime := time.Since(v.srv.Started())
	f := []info.Field{
		info.Text("redis_version", "7.2.0"),
		info.Text("bucketd_version", v.e.cfg.Version),
		info.Text("redis_mode", "standalone"),
		info.Text("os", runtime.GOOS),
		info.Int("arch_bits", strconv.IntSize),
		info.Text("go_version", runtime.Version()),
		info.Int("process_id", int64(os.Getpid())),
	}
	if addr := v.srv.Addr(); addr != nil {
		f = append(f, info.Text("tcp_addr", addr.String()))
	}
	f = append(f,
		info.Int("uptime_in_seconds", int64(uptime/time.Second)),
		info.Int("uptime_in_days", int64(uptime/(24*time.Hour))),
		info.Int("gomaxprocs", int64(runtime.GOMAXPROCS(0))),
	)
	return info.Section{Title: "Server", Fields: f}
}

func (v infoView) clients() info.Section {
	return info.Section{Title: "Clients", Fields: []info.Field{
		info.Int("connected_clients", v.srv.Stats().ConnectedClients),
		info.Int("blocked_clients", 0),
	}}
}

// infoMemory reports the Go heap without the GC ballast (never touched, so
// not data) plus the bucket tables, which are mapped outside the heap.
func (v infoView) memory() info.Section {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	tables := v.st.TableBytes
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

func (v infoView) stats() info.Section {
	conns, cmds := v.srv.Stats(), v.e.Stats()
	var errs int64
	for _, n := range cmds.Errors {
		errs += n
	}
	return info.Section{Title: "Stats", Fields: []info.Field{
		info.Int("total_connections_received", conns.TotalConnections),
		info.Int("rejected_connections", conns.RejectedConnections),
		info.Int("total_commands_processed", cmds.TotalCommands),
		info.Int("total_error_replies", errs),
		info.Int("protocol_errors", cmds.Errors[ErrProtocol]),
		info.Int("unknown_commands", cmds.Errors[ErrUnknownCmd]),
		info.Int("expired_keys", v.st.Expired),
		info.Int("client_output_buffer_limit_disconnections", conns.OutputLimitDisconnections[resp.NormalClient]+conns.OutputLimitDisconnections[resp.PubSubClient]),
	}}
}

func (v infoView) bucketd() info.Section {
	st := v.st
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
func (v infoView) policies() info.Section {
	stats := v.e.policyStats()[1:] // [0]: explicit limits, which the # Bucketd totals cover
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
