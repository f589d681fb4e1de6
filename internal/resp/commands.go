package resp

import (
	"path"
	"strconv"
	"strings"

	"github.com/tidwall/redcon"
)

// The handlers of the commands that do not touch buckets. Each runs after
// the command table's checks (see commandSpec), writes its reply and returns
// nil, or returns its error reply without writing anything.

func (s *Server) cmdUnknown(c redcon.Conn, sess *session, args [][]byte) *errorReply {
	return unknownCommand(args)
}

func (s *Server) cmdPing(c redcon.Conn, sess *session, args [][]byte) *errorReply {
	if len(args) == 2 {
		c.WriteBulk(args[1])
	} else {
		c.WriteString("PONG")
	}
	return nil
}

func (s *Server) cmdEcho(c redcon.Conn, sess *session, args [][]byte) *errorReply {
	c.WriteBulk(args[1])
	return nil
}

func (s *Server) cmdQuit(c redcon.Conn, sess *session, args [][]byte) *errorReply {
	c.WriteString("OK")
	sess.quit = true
	return nil
}

func (s *Server) cmdSelect(c redcon.Conn, sess *session, args [][]byte) *errorReply {
	n, ok := parseInt(args[1])
	switch {
	case !ok:
		return errNotInteger
	case n != 0:
		return errDBIndex // bucketd has one keyspace, database 0
	}
	c.WriteString("OK")
	return nil
}

func (s *Server) cmdDBSize(c redcon.Conn, sess *session, args [][]byte) *errorReply {
	c.WriteInt64(s.cfg.Limiter.Stats().Buckets)
	return nil
}

// cmdInfo answers INFO as Redis 7 does: a verbatim string in RESP3, a bulk
// string in RESP2.
func (s *Server) cmdInfo(c redcon.Conn, sess *session, args [][]byte) *errorReply {
	sess.writeVerbatim(c, s.info(args[1:]))
	return nil
}

// cmdHello answers HELLO [protover [AUTH user pass] [SETNAME name]]:
// protover 2 or 3 switches the connection to RESP2 or RESP3 (other numbers
// get -NOPROTO), and the reply is written in the protocol now in use.
// Without protover the protocol stays as it was.
func (s *Server) cmdHello(c redcon.Conn, sess *session, args [][]byte) *errorReply {
	var opts [][]byte
	var version int64
	if len(args) >= 2 {
		v, ok := parseInt(args[1])
		if !ok {
			return errProtoVersion
		}
		if v != 2 && v != 3 {
			return errNoProto
		}
		version, opts = v, args[2:]
	}
	name, authed, e := s.helloOptions(opts, sess.authed)
	if e != nil {
		return e
	}
	if !authed {
		return errHelloNoAuth
	}
	sess.authed = true
	if name != nil {
		sess.name = append(sess.name[:0], name...)
	}
	if version != 0 {
		sess.resp3 = version == 3
	}
	s.writeHello(c, sess)
	return nil
}

// helloOptions checks HELLO's options and returns what they ask for: the
// client name (nil for none) and whether the client is authenticated once
// they apply. Nothing is applied here, so a bad option changes nothing.
func (s *Server) helloOptions(opts [][]byte, authed bool) (name []byte, _ bool, _ *errorReply) {
	for i := 0; i < len(opts); i++ {
		switch {
		case equalFold(opts[i], "AUTH") && i+2 < len(opts):
			if !s.password.ok(opts[i+1], opts[i+2]) {
				return nil, false, errWrongPass
			}
			authed = true
			i += 2
		case equalFold(opts[i], "SETNAME") && i+1 < len(opts):
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
func (s *Server) writeHello(c redcon.Conn, sess *session) {
	proto := 2
	if sess.resp3 {
		proto = 3
	}
	sess.writeMap(c, 7)
	c.WriteBulkString("server")
	c.WriteBulkString("bucketd")
	c.WriteBulkString("version")
	c.WriteBulkString(s.cfg.Version)
	c.WriteBulkString("proto")
	c.WriteInt(proto)
	c.WriteBulkString("id")
	c.WriteInt64(sess.id)
	c.WriteBulkString("mode")
	c.WriteBulkString("standalone")
	c.WriteBulkString("role")
	c.WriteBulkString("master")
	c.WriteBulkString("modules")
	c.WriteArray(0)
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

func (s *Server) cmdClientSetName(c redcon.Conn, sess *session, args [][]byte) *errorReply {
	if !validClientName(args[2]) {
		return errClientName
	}
	sess.name = append(sess.name[:0], args[2]...)
	c.WriteString("OK")
	return nil
}

func (s *Server) cmdClientGetName(c redcon.Conn, sess *session, args [][]byte) *errorReply {
	if len(sess.name) == 0 {
		sess.writeNull(c)
	} else {
		c.WriteBulk(sess.name)
	}
	return nil
}

func (s *Server) cmdClientID(c redcon.Conn, sess *session, args [][]byte) *errorReply {
	c.WriteInt64(sess.id)
	return nil
}

// cmdClientSetInfo accepts the library name and version clients send at
// connection time, and keeps neither.
func (s *Server) cmdClientSetInfo(c redcon.Conn, sess *session, args [][]byte) *errorReply {
	if !equalFold(args[2], "LIB-NAME") && !equalFold(args[2], "LIB-VER") {
		return unrecognizedOption(args[2])
	}
	c.WriteString("OK")
	return nil
}

// cmdClientOnOff answers CLIENT NO-EVICT and CLIENT NO-TOUCH ON|OFF, which
// clients send only when configured to: bucketd neither evicts clients nor
// tracks key access, so there is nothing to change.
func (s *Server) cmdClientOnOff(c redcon.Conn, sess *session, args [][]byte) *errorReply {
	if !equalFold(args[2], "ON") && !equalFold(args[2], "OFF") {
		return errSyntax
	}
	c.WriteString("OK")
	return nil
}

// COMMAND and its subcommands give redis-cli and client libraries enough
// to start. COMMAND alone is COMMAND INFO with no names.

func (s *Server) cmdCommand(c redcon.Conn, sess *session, args [][]byte) *errorReply {
	sess.writeCommandTable(c)
	return nil
}

func (s *Server) cmdCommandCount(c redcon.Conn, sess *session, args [][]byte) *errorReply {
	c.WriteInt(len(commandTable))
	return nil
}

func (s *Server) cmdCommandList(c redcon.Conn, sess *session, args [][]byte) *errorReply {
	c.WriteArray(len(commandTable))
	for i := range commandTable {
		c.WriteBulkString(commandTable[i].name)
	}
	return nil
}

// cmdCommandInfo writes an entry per name, and a null for a name bucketd
// does not know.
func (s *Server) cmdCommandInfo(c redcon.Conn, sess *session, args [][]byte) *errorReply {
	names := args[2:]
	if len(names) == 0 {
		sess.writeCommandTable(c)
		return nil
	}
	c.WriteArray(len(names))
	for _, n := range names {
		if cmd := lookup(commandTable, n); cmd != nil {
			sess.writeCommandInfo(c, cmd)
		} else {
			sess.writeNull(c)
		}
	}
	return nil
}

// cmdCommandDocs has no documentation to give: redis-cli then falls back to
// its built-in hints. An empty map is what Redis sends for unknown names.
func (s *Server) cmdCommandDocs(c redcon.Conn, sess *session, args [][]byte) *errorReply {
	sess.writeMap(c, 0)
	return nil
}

func (sess *session) writeCommandTable(c redcon.Conn) {
	c.WriteArray(len(commandTable))
	for i := range commandTable {
		sess.writeCommandInfo(c, &commandTable[i])
	}
}

// writeCommandInfo writes one entry in Redis 7's ten-field COMMAND format,
// with Redis's types: the flags, ACL categories, tips and key specs are
// sets in RESP3, and so is the empty list of subcommands.
func (sess *session) writeCommandInfo(c redcon.Conn, cmd *commandSpec) {
	c.WriteArray(10)
	c.WriteBulkString(cmd.name)
	c.WriteInt(cmd.arity)
	sess.writeSet(c, len(cmd.flags))
	for _, f := range cmd.flags {
		c.WriteString(f)
	}
	c.WriteInt(cmd.keys.first)
	c.WriteInt(cmd.keys.last)
	c.WriteInt(cmd.keys.step)
	sess.writeSet(c, 0) // ACL categories
	sess.writeSet(c, 0) // tips
	sess.writeSet(c, 0) // key specs
	sess.writeSet(c, 0) // subcommands
}

// cmdConfigGet answers CONFIG GET with the few parameters tools ask for at
// start (redis-benchmark asks for "save" and "appendonly"); other
// parameters match nothing, as unknown ones do in Redis. The reply is a map
// of names to values (a flat array in RESP2).
func (s *Server) cmdConfigGet(c redcon.Conn, sess *session, args [][]byte) *errorReply {
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
	sess.writeMap(c, len(out)/2)
	for _, v := range out {
		c.WriteBulkString(v)
	}
	return nil
}

// cmdConfigReload reloads the configuration file, as SIGHUP does.
func (s *Server) cmdConfigReload(c redcon.Conn, sess *session, args [][]byte) *errorReply {
	if s.cfg.Reload == nil {
		return errNoReloadConfig
	}
	if err := s.cfg.Reload(); err != nil {
		return reloadFailed(err)
	}
	c.WriteString("OK")
	return nil
}
