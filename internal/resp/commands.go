package resp

import (
	"os"
	"path"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/redcon"

	"github.com/bucketd/bucketd/internal/gcfloor"
	"github.com/bucketd/bucketd/internal/info"
)

type cmdID uint8

const (
	cmdUnknown cmdID = iota
	cmdAcquire
	cmdPeek
	cmdReset
	cmdThrottle
	cmdPing
	cmdEcho
	cmdQuit
	cmdSelect
	cmdHello
	cmdClient
	cmdCommand
	cmdInfo
	cmdDBSize
	cmdConfig
	cmdAuth
	numCommands // not a command: the number of cmdIDs
)

// commandSpec describes a command for COMMAND and for lookup.
type commandSpec struct {
	id                      cmdID
	upper                   string // name in upper case, for case-insensitive matching
	arity                   int    // Redis convention: n exact, -n at least n (name included)
	flags                   []string
	firstKey, lastKey, step int
}

var commandTable = []commandSpec{
	{cmdAcquire, "TB.ACQUIRE", -4, []string{"write", "fast"}, 1, 1, 1},
	{cmdPeek, "TB.PEEK", -4, []string{"readonly", "fast"}, 1, 1, 1},
	{cmdReset, "TB.RESET", -2, []string{"write"}, 1, -1, 1},
	{cmdThrottle, "CL.THROTTLE", -5, []string{"write", "fast"}, 1, 1, 1},
	{cmdPing, "PING", -1, []string{"fast", "stale"}, 0, 0, 0},
	{cmdEcho, "ECHO", 2, []string{"fast"}, 0, 0, 0},
	{cmdQuit, "QUIT", -1, []string{"fast", "noauth"}, 0, 0, 0},
	{cmdSelect, "SELECT", 2, []string{"fast", "loading"}, 0, 0, 0},
	{cmdHello, "HELLO", -1, []string{"fast", "noauth"}, 0, 0, 0},
	{cmdClient, "CLIENT", -2, []string{"fast"}, 0, 0, 0},
	{cmdCommand, "COMMAND", -1, []string{"loading", "stale"}, 0, 0, 0},
	{cmdInfo, "INFO", -1, []string{"loading", "stale"}, 0, 0, 0},
	{cmdDBSize, "DBSIZE", 1, []string{"readonly", "fast"}, 0, 0, 0},
	{cmdConfig, "CONFIG", -2, []string{"admin", "loading", "stale"}, 0, 0, 0},
	{cmdAuth, "AUTH", -2, []string{"fast", "noauth"}, 0, 0, 0},
}

func init() {
	for i := range commandTable {
		if commandTable[i].id != cmdID(i+1) {
			panic("resp: commandTable must list commands in cmdID order")
		}
	}
}

// lookup finds a command by name, ignoring case, without allocating. The
// bucket commands are tried first: they are the hot path.
func lookup(name []byte) cmdID {
	for i := range commandTable {
		if equalFold(name, commandTable[i].upper) {
			return commandTable[i].id
		}
	}
	return cmdUnknown
}

// execOther answers every command that does not touch buckets.
func (s *Server) execOther(c redcon.Conn, sess *session, id cmdID, args [][]byte) {
	if id != cmdUnknown {
		spec := &commandTable[id-1]
		if n := len(args); spec.arity > 0 && n != spec.arity || spec.arity < 0 && n < -spec.arity {
			c.WriteError(arityError(strings.ToLower(spec.upper)))
			return
		}
	}
	switch id {
	case cmdPing:
		switch len(args) {
		case 1:
			c.WriteString("PONG")
		case 2:
			c.WriteBulk(args[1])
		default:
			c.WriteError(errArity["ping"])
		}
	case cmdEcho:
		if len(args) != 2 {
			c.WriteError(errArity["echo"])
			return
		}
		c.WriteBulk(args[1])
	case cmdQuit:
		c.WriteString("OK")
		sess.quit = true
	case cmdSelect:
		s.cmdSelect(c, args)
	case cmdHello:
		s.cmdHello(c, sess, args)
	case cmdClient:
		s.cmdClient(c, sess, args)
	case cmdCommand:
		s.cmdCommand(c, args)
	case cmdInfo:
		c.WriteBulk(s.info(args[1:]))
	case cmdDBSize:
		if len(args) != 1 {
			c.WriteError(errArity["dbsize"])
			return
		}
		c.WriteInt64(s.cfg.Limiter.Stats().Buckets)
	case cmdConfig:
		s.cmdConfig(c, args)
	case cmdAuth:
		s.cmdAuth(c, sess, args)
	default:
		c.WriteError(unknownCommandError(args))
	}
}

// unknownCommandError words the reply as Redis 7 does, quoting at most
// about 128 bytes of the name and of the arguments.
func unknownCommandError(args [][]byte) string {
	var b strings.Builder
	b.WriteString("ERR unknown command '")
	b.Write(args[0][:min(len(args[0]), 128)])
	b.WriteString("', with args beginning with: ")
	quoted := 0
	for _, a := range args[1:] {
		if quoted >= 128 {
			break
		}
		n := min(len(a), 128-quoted)
		b.WriteByte('\'')
		b.Write(a[:n])
		b.WriteString("' ")
		quoted += n + 3
	}
	return b.String()
}

func (s *Server) cmdSelect(c redcon.Conn, args [][]byte) {
	if len(args) != 2 {
		c.WriteError(errArity["select"])
		return
	}
	n, ok := parseInt(args[1])
	switch {
	case !ok:
		c.WriteError(errNotInteger)
	case n != 0:
		c.WriteError(errDBIndex) // bucketd has one keyspace, database 0
	default:
		c.WriteString("OK")
	}
}

// cmdHello answers HELLO [protover [AUTH user pass] [SETNAME name]] for
// RESP2. RESP3 is not implemented, so HELLO 3 gets -NOPROTO and clients
// such as go-redis fall back to RESP2.
func (s *Server) cmdHello(c redcon.Conn, sess *session, args [][]byte) {
	if len(args) >= 2 {
		v, ok := parseInt(args[1])
		if !ok {
			c.WriteError(errProtoVersion)
			return
		}
		if v != 2 {
			c.WriteError(errNoProto)
			return
		}
	}
	// Check every option before applying any, so a bad one changes nothing.
	var name []byte
	authed := sess.authed
	for i := 2; i < len(args); i++ {
		switch {
		case equalFold(args[i], "AUTH") && i+2 < len(args):
			if !s.password.ok(args[i+1], args[i+2]) {
				c.WriteError(errWrongPass)
				return
			}
			authed = true
			i += 2
		case equalFold(args[i], "SETNAME") && i+1 < len(args):
			if !validClientName(args[i+1]) {
				c.WriteError(errClientName)
				return
			}
			name = args[i+1]
			i++
		default:
			c.WriteError("ERR Syntax error in HELLO option '" + truncate(args[i]) + "'")
			return
		}
	}
	if !authed {
		c.WriteError(errHelloNoAuth)
		return
	}
	sess.authed = true
	if name != nil {
		sess.name = append(sess.name[:0], name...)
	}
	c.WriteArray(14)
	c.WriteBulkString("server")
	c.WriteBulkString("bucketd")
	c.WriteBulkString("version")
	c.WriteBulkString(s.cfg.Version)
	c.WriteBulkString("proto")
	c.WriteInt(2)
	c.WriteBulkString("id")
	c.WriteInt64(sess.id)
	c.WriteBulkString("mode")
	c.WriteBulkString("standalone")
	c.WriteBulkString("role")
	c.WriteBulkString("master")
	c.WriteBulkString("modules")
	c.WriteArray(0)
}

// truncate returns at most the first 128 bytes of b, as Redis quotes
// arguments in error replies.
func truncate(b []byte) string { return string(b[:min(len(b), 128)]) }

// validClientName follows Redis: printable ASCII without spaces.
func validClientName(name []byte) bool {
	for _, ch := range name {
		if ch < '!' || ch > '~' {
			return false
		}
	}
	return true
}

func (s *Server) cmdClient(c redcon.Conn, sess *session, args [][]byte) {
	sub := args[1]
	switch {
	case equalFold(sub, "SETNAME"):
		if len(args) != 3 {
			c.WriteError(errArity["client|setname"])
			return
		}
		if !validClientName(args[2]) {
			c.WriteError(errClientName)
			return
		}
		sess.name = append(sess.name[:0], args[2]...)
		c.WriteString("OK")
	case equalFold(sub, "GETNAME"):
		if len(args) != 2 {
			c.WriteError(errArity["client|getname"])
			return
		}
		if len(sess.name) == 0 {
			c.WriteNull()
			return
		}
		c.WriteBulk(sess.name)
	case equalFold(sub, "ID"):
		if len(args) != 2 {
			c.WriteError(errArity["client|id"])
			return
		}
		c.WriteInt64(sess.id)
	case equalFold(sub, "SETINFO"):
		if len(args) != 4 {
			c.WriteError(errArity["client|setinfo"])
			return
		}
		if !equalFold(args[2], "LIB-NAME") && !equalFold(args[2], "LIB-VER") {
			c.WriteError("ERR Unrecognized option '" + truncate(args[2]) + "'")
			return
		}
		c.WriteString("OK")
	default:
		c.WriteError("ERR unknown subcommand '" + truncate(sub) + "'. Try CLIENT HELP.")
	}
}

// cmdCommand answers COMMAND, COMMAND COUNT, COMMAND INFO, COMMAND LIST and
// COMMAND DOCS: enough for redis-cli and client libraries to start.
func (s *Server) cmdCommand(c redcon.Conn, args [][]byte) {
	if len(args) == 1 {
		c.WriteArray(len(commandTable))
		for i := range commandTable {
			writeCommandInfo(c, &commandTable[i])
		}
		return
	}
	sub := args[1]
	switch {
	case equalFold(sub, "COUNT"):
		c.WriteInt(len(commandTable))
	case equalFold(sub, "LIST"):
		c.WriteArray(len(commandTable))
		for i := range commandTable {
			c.WriteBulkString(strings.ToLower(commandTable[i].upper))
		}
	case equalFold(sub, "INFO"):
		names := args[2:]
		if len(names) == 0 {
			c.WriteArray(len(commandTable))
			for i := range commandTable {
				writeCommandInfo(c, &commandTable[i])
			}
			return
		}
		c.WriteArray(len(names))
		for _, n := range names {
			if spec := findSpec(n); spec != nil {
				writeCommandInfo(c, spec)
			} else {
				c.WriteNull()
			}
		}
	case equalFold(sub, "DOCS"):
		// No documentation replies: redis-cli then falls back to its
		// built-in hints. An empty map is what Redis sends for unknown names.
		c.WriteArray(0)
	default:
		c.WriteError("ERR unknown subcommand '" + truncate(sub) + "'. Try COMMAND HELP.")
	}
}

func findSpec(name []byte) *commandSpec {
	for i := range commandTable {
		if equalFold(name, commandTable[i].upper) {
			return &commandTable[i]
		}
	}
	return nil
}

// writeCommandInfo writes one entry in Redis 7's ten-field COMMAND format.
func writeCommandInfo(c redcon.Conn, spec *commandSpec) {
	c.WriteArray(10)
	c.WriteBulkString(strings.ToLower(spec.upper))
	c.WriteInt(spec.arity)
	c.WriteArray(len(spec.flags))
	for _, f := range spec.flags {
		c.WriteString(f)
	}
	c.WriteInt(spec.firstKey)
	c.WriteInt(spec.lastKey)
	c.WriteInt(spec.step)
	c.WriteArray(0) // ACL categories
	c.WriteArray(0) // tips
	c.WriteArray(0) // key specs
	c.WriteArray(0) // subcommands
}

// cmdConfig answers CONFIG GET with the few parameters tools ask for at
// start (redis-benchmark asks for "save" and "appendonly"); other
// parameters match nothing, as unknown ones do in Redis.
func (s *Server) cmdConfig(c redcon.Conn, args [][]byte) {
	if equalFold(args[1], "RELOAD") {
		switch {
		case len(args) != 2:
			c.WriteError(errArity["config|reload"])
		case s.cfg.Reload == nil:
			c.WriteError("ERR CONFIG RELOAD needs a configuration file: start bucketd with --config")
		default:
			if err := s.cfg.Reload(); err != nil {
				c.WriteError("ERR reload failed, the running configuration stays: " + err.Error())
				return
			}
			c.WriteString("OK")
		}
		return
	}
	if !equalFold(args[1], "GET") {
		c.WriteError("ERR unknown subcommand '" + truncate(args[1]) + "'. Try CONFIG HELP.")
		return
	}
	if len(args) < 3 {
		c.WriteError(errArity["config|get"])
		return
	}
	params := [][2]string{
		{"save", ""},
		{"appendonly", "no"},
		{"databases", "1"},
		{"maxmemory", "0"},
		{"proto-max-bulk-len", strconv.Itoa(s.cfg.Limits.MaxQueryBytes)},
		{"client-query-buffer-limit", strconv.Itoa(s.cfg.Limits.MaxQueryBytes)},
	}
	var out []string
	for _, kv := range params { // each parameter once, however many patterns match
		for _, pat := range args[2:] {
			if ok, _ := path.Match(strings.ToLower(string(pat)), kv[0]); ok {
				out = append(out, kv[0], kv[1])
				break
			}
		}
	}
	c.WriteArray(len(out))
	for _, v := range out {
		c.WriteBulkString(v)
	}
}

// info builds the INFO reply for the requested sections ("all", "default"
// or none means every section).
func (s *Server) info(sections [][]byte) []byte {
	want := func(name string) bool {
		if len(sections) == 0 {
			return true
		}
		for _, sec := range sections {
			if equalFold(sec, strings.ToUpper(name)) || equalFold(sec, "ALL") || equalFold(sec, "DEFAULT") || equalFold(sec, "EVERYTHING") {
				return true
			}
		}
		return false
	}
	var b []byte
	field := func(k string, v int64) {
		b = append(b, k...)
		b = append(b, ':')
		b = strconv.AppendInt(b, v, 10)
		b = append(b, '\r', '\n')
	}
	text := func(k, v string) {
		b = append(b, k...)
		b = append(b, ':')
		b = append(b, v...)
		b = append(b, '\r', '\n')
	}
	section := func(title string) {
		if len(b) > 0 {
			b = append(b, '\r', '\n')
		}
		b = append(b, "# "+title+"\r\n"...)
	}
	st := s.cfg.Limiter.Stats()
	if want("server") {
		uptime := time.Since(s.started)
		section("Server")
		text("redis_version", "7.2.0")
		text("bucketd_version", s.cfg.Version)
		text("redis_mode", "standalone")
		text("os", runtime.GOOS)
		field("arch_bits", strconv.IntSize)
		text("go_version", runtime.Version())
		field("process_id", int64(os.Getpid()))
		if addr := s.Addr(); addr != nil {
			text("tcp_addr", addr.String())
		}
		field("uptime_in_seconds", int64(uptime/time.Second))
		field("uptime_in_days", int64(uptime/(24*time.Hour)))
		field("gomaxprocs", int64(runtime.GOMAXPROCS(0)))
	}
	if want("clients") {
		section("Clients")
		field("connected_clients", s.n.connected.Load())
		field("blocked_clients", 0)
	}
	if want("memory") {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		section("Memory")
		tables := st.TableBytes                       // mapped outside the Go heap
		heap := int64(ms.HeapAlloc) - gcfloor.Bytes() // the GC ballast is never touched: not data
		field("used_memory", heap+tables)
		field("used_memory_heap", heap)
		field("used_memory_tables", tables)
		field("used_memory_sys", int64(ms.Sys)+tables)
		field("maxmemory", 0)
		text("mem_allocator", "go")
	}
	if want("stats") {
		section("Stats")
		sv := s.Stats()
		field("total_connections_received", sv.TotalConnections)
		field("rejected_connections", sv.RejectedConnections)
		field("total_commands_processed", sv.TotalCommands)
		var errs int64
		for _, n := range sv.Errors {
			errs += n
		}
		field("total_error_replies", errs)
		field("protocol_errors", sv.Errors[ErrProtocol])
		field("unknown_commands", sv.Errors[ErrUnknownCmd])
		field("expired_keys", st.Expired)
	}
	if want("bucketd") {
		section("Bucketd")
		field("buckets", st.Buckets)
		field("acquire_allowed_total", st.Allowed)
		field("acquire_denied_total", st.Denied)
		field("peek_total", st.Peeks)
		field("reset_removed_total", st.Resets)
		field("expired_total", st.Expired)
		field("evicted_total", st.Evicted)
		field("shards", st.Shards)
		field("shard_queue_depth", st.QueueDepth)
	}
	for _, section := range s.cfg.Info {
		if sec := section(); want(strings.ToLower(sec.Title)) {
			if len(b) > 0 {
				b = append(b, '\r', '\n')
			}
			b = info.Append(b, sec)
		}
	}
	if want("keyspace") {
		section("Keyspace")
		if st.Buckets > 0 {
			b = append(b, "db0:keys="...)
			b = strconv.AppendInt(b, st.Buckets, 10)
			b = append(b, ",expires="...)
			b = strconv.AppendInt(b, st.Buckets, 10)
			b = append(b, ",avg_ttl=0\r\n"...)
		}
	}
	return b
}
