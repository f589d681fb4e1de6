package command

import (
	"path"
	"strconv"
	"strings"

	"github.com/bucketd/bucketd/internal/resp/wire"
)

// The handlers of the commands that do not touch buckets. Each runs after
// the command table's checks (see commandSpec), writes its reply and returns
// nil, or returns its error reply without writing anything.

func cmdUnknown(s *session, args [][]byte) *errorReply {
	return unknownCommand(args)
}

func cmdPing(s *session, args [][]byte) *errorReply {
	if len(args) == 2 {
		s.w.Bulk(args[1])
	} else {
		s.w.String("PONG")
	}
	return nil
}

func cmdEcho(s *session, args [][]byte) *errorReply {
	s.w.Bulk(args[1])
	return nil
}

func cmdQuit(s *session, args [][]byte) *errorReply {
	s.w.String("OK")
	s.quit = true
	return nil
}

func cmdSelect(s *session, args [][]byte) *errorReply {
	n, ok := wire.ParseInt(args[1])
	switch {
	case !ok:
		return errNotInteger
	case n != 0:
		return errDBIndex // bucketd has one keyspace, database 0
	}
	s.w.String("OK")
	return nil
}

func cmdDBSize(s *session, args [][]byte) *errorReply {
	s.w.Int64(s.e.cfg.Limiter.Stats().Buckets)
	return nil
}

// cmdInfo answers INFO as Redis 7 does: a verbatim string in RESP3, a bulk
// string in RESP2.
func cmdInfo(s *session, args [][]byte) *errorReply {
	s.w.Verbatim(s.e.info(s, args[1:]))
	return nil
}

// cmdHello answers HELLO [protover [AUTH user pass] [SETNAME name]]:
// protover 2 or 3 switches the connection to RESP2 or RESP3 (other numbers
// get -NOPROTO), and the reply is written in the protocol now in use.
// Without protover the protocol stays as it was.
func cmdHello(s *session, args [][]byte) *errorReply {
	var opts [][]byte
	var version int64
	if len(args) >= 2 {
		v, ok := wire.ParseInt(args[1])
		if !ok {
			return errProtoVersion
		}
		if v != 2 && v != 3 {
			return errNoProto
		}
		version, opts = v, args[2:]
	}
	name, authed, e := s.helloOptions(opts, s.authed)
	if e != nil {
		return e
	}
	if !authed {
		return errHelloNoAuth
	}
	s.authenticate()
	if name != nil {
		s.setName(name)
	}
	if version != 0 {
		s.w.SetRESP3(version == 3)
	}
	s.writeHello()
	return nil
}

// helloOptions checks HELLO's options and returns what they ask for: the
// client name (nil for none) and whether the client is authenticated once
// they apply. Nothing is applied here, so a bad option changes nothing.
func (s *session) helloOptions(opts [][]byte, authed bool) (name []byte, _ bool, _ *errorReply) {
	for i := 0; i < len(opts); i++ {
		switch {
		case wire.EqualFold(opts[i], "AUTH") && i+2 < len(opts):
			if !s.e.password.ok(opts[i+1], opts[i+2]) {
				return nil, false, errWrongPass
			}
			authed = true
			i += 2
		case wire.EqualFold(opts[i], "SETNAME") && i+1 < len(opts):
			if !validClientName(opts[i+1]) {
				return nil, false, errClientName
			}
			name = opts[i+1]
			i++
		default:
			return nil, false, helloOptionError(opts[i])
		}
	}
	return name, authed, nil
}

// writeHello writes HELLO's reply: a map of the server's properties, in
// Redis's order. proto is an integer, which redis-py and rueidis check.
func (s *session) writeHello() {
	proto := 2
	if s.w.RESP3() {
		proto = 3
	}
	s.w.Map(7)
	s.w.BulkString("server")
	s.w.BulkString("bucketd")
	s.w.BulkString("version")
	s.w.BulkString(s.e.cfg.Version)
	s.w.BulkString("proto")
	s.w.Int(proto)
	s.w.BulkString("id")
	s.w.Int64(s.c.ID())
	s.w.BulkString("mode")
	s.w.BulkString("standalone")
	s.w.BulkString("role")
	s.w.BulkString("master")
	s.w.BulkString("modules")
	s.w.Array(0)
}

// validClientName follows Redis: printable ASCII without spaces.
func validClientName(name []byte) bool {
	for _, ch := range name {
		if ch < '!' || ch > '~' {
			return false
		}
	}
	return true
}

func cmdClientSetName(s *session, args [][]byte) *errorReply {
	if !validClientName(args[2]) {
		return errClientName
	}
	s.setName(args[2])
	s.w.String("OK")
	return nil
}

func cmdClientGetName(s *session, args [][]byte) *errorReply {
	if len(s.name) == 0 {
		s.w.Null()
	} else {
		s.w.Bulk(s.name)
	}
	return nil
}

func cmdClientID(s *session, args [][]byte) *errorReply {
	s.w.Int64(s.c.ID())
	return nil
}

// cmdClientSetInfo keeps the library name and version clients send at
// connection time, which CLIENT LIST shows; a value must be printable
// ASCII without spaces, as in Redis.
func cmdClientSetInfo(s *session, args [][]byte) *errorReply {
	var dst *[]byte
	switch {
	case wire.EqualFold(args[2], "LIB-NAME"):
		dst = &s.pub.libName
	case wire.EqualFold(args[2], "LIB-VER"):
		dst = &s.pub.libVer
	default:
		return unrecognizedOption(args[2])
	}
	if !validClientName(args[3]) {
		return &errorReply{"ERR " + truncate(args[2]) + " cannot contain spaces, newlines or special characters.", ErrInvalidArg}
	}
	s.pub.mu.Lock()
	*dst = append((*dst)[:0], args[3]...)
	s.pub.mu.Unlock()
	s.w.String("OK")
	return nil
}

// cmdClientOnOff answers CLIENT NO-EVICT and CLIENT NO-TOUCH ON|OFF, which
// clients send only when configured to: bucketd neither evicts clients nor
// tracks key access, so there is nothing to change.
func cmdClientOnOff(s *session, args [][]byte) *errorReply {
	if !wire.EqualFold(args[2], "ON") && !wire.EqualFold(args[2], "OFF") {
		return errSyntax
	}
	s.w.String("OK")
	return nil
}

// COMMAND and its subcommands give redis-cli and client libraries enough
// to start. COMMAND alone is COMMAND INFO with no names.

func cmdCommand(s *session, args [][]byte) *errorReply {
	s.writeCommandTable()
	return nil
}

func cmdCommandCount(s *session, args [][]byte) *errorReply {
	s.w.Int(len(commandTable))
	return nil
}

func cmdCommandList(s *session, args [][]byte) *errorReply {
	s.w.Array(len(commandTable))
	for i := range commandTable {
		s.w.BulkString(commandTable[i].name)
	}
	return nil
}

// cmdCommandInfo writes an entry per name, and a null for a name bucketd
// does not know.
func cmdCommandInfo(s *session, args [][]byte) *errorReply {
	names := args[2:]
	if len(names) == 0 {
		s.writeCommandTable()
		return nil
	}
	s.w.Array(len(names))
	for _, n := range names {
		if cmd := lookup(commandTable, n); cmd != nil {
			s.writeCommandInfo(cmd)
		} else {
			s.w.Null()
		}
	}
	return nil
}

// cmdCommandDocs has no documentation to give: redis-cli then falls back to
// its built-in hints. An empty map is what Redis sends for unknown names.
func cmdCommandDocs(s *session, args [][]byte) *errorReply {
	s.w.Map(0)
	return nil
}

func (s *session) writeCommandTable() {
	s.w.Array(len(commandTable))
	for i := range commandTable {
		s.writeCommandInfo(&commandTable[i])
	}
}

// writeCommandInfo writes one entry in Redis 7's ten-field COMMAND format,
// with Redis's types: the flags, ACL categories, tips and key specs are
// sets in RESP3, and so is the empty list of subcommands.
func (s *session) writeCommandInfo(cmd *commandSpec) {
	s.w.Array(10)
	s.w.BulkString(cmd.name)
	s.w.Int(cmd.arity)
	s.w.Set(len(cmd.flags))
	for _, f := range cmd.flags {
		s.w.String(f)
	}
	s.w.Int(cmd.keys.first)
	s.w.Int(cmd.keys.last)
	s.w.Int(cmd.keys.step)
	s.w.Set(0) // ACL categories
	s.w.Set(0) // tips
	s.w.Set(0) // key specs
	s.w.Set(0) // subcommands
}

// cmdConfigGet answers CONFIG GET with the few parameters tools ask for at
// start (redis-benchmark asks for "save" and "appendonly"); other
// parameters match nothing, as unknown ones do in Redis. The reply is a map
// of names to values (a flat array in RESP2).
func cmdConfigGet(s *session, args [][]byte) *errorReply {
	params := [][2]string{
		{"save", ""},
		{"appendonly", "no"},
		{"databases", "1"},
		{"maxmemory", "0"},
		{"proto-max-bulk-len", strconv.Itoa(s.c.Server().Limits().MaxQueryBytes)},
		{"client-query-buffer-limit", strconv.Itoa(s.c.Server().Limits().MaxQueryBytes)},
		{"client-output-buffer-limit", s.c.Server().OutputLimits().String()},
		{"slowlog-log-slower-than", strconv.FormatInt(s.e.slowlog.slowerMicros(), 10)},
		{"slowlog-max-len", strconv.Itoa(s.e.slowlog.maxLen())},
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
	s.w.Map(len(out) / 2)
	for _, v := range out {
		s.w.BulkString(v)
	}
	return nil
}

// cmdConfigReload reloads the configuration file, as SIGHUP does. The
// reply is OK, naming the changed settings that need a restart when there
// are any, so that an operator who typed it learns at once what the
// reload did not apply.
func cmdConfigReload(s *session, args [][]byte) *errorReply {
	if s.e.cfg.Reload == nil {
		return errNoReloadConfig
	}
	restart, err := s.e.cfg.Reload()
	if err != nil {
		return reloadFailed(err)
	}
	if len(restart) == 0 {
		s.w.String("OK")
	} else {
		s.w.String("OK; restart bucketd to apply " + strings.Join(restart, ", "))
	}
	return nil
}
