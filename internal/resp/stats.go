package resp

import (
	"strings"
	"sync/atomic"

	"github.com/tidwall/redcon"
)

// ErrorKind classifies the error replies bucketd sends, for metrics.
type ErrorKind uint8

// Error kinds, in the order ErrorKinds lists their names.
const (
	ErrArity       ErrorKind = iota // wrong number of arguments
	ErrInvalidArg                   // a number, key or option that is not valid
	ErrUnknownCmd                   // unknown command or subcommand
	ErrProtocol                     // protocol error; the connection was closed
	ErrAuth                         // NOAUTH, WRONGPASS and friends
	ErrUnavailable                  // the store could not answer (shutting down, Redis down)
	numErrorKinds
)

// ErrorKinds names the error kinds, indexed by ErrorKind; the names are
// metric label values.
var ErrorKinds = [numErrorKinds]string{"arity", "invalid_argument", "unknown_command", "protocol", "auth", "unavailable"}

// CommandNames returns the lower-case names of the commands bucketd knows,
// indexed like ServerStats.Commands; "other" counts unknown commands.
func CommandNames() []string {
	names := make([]string, numCommands)
	names[cmdUnknown] = "other"
	for _, spec := range commandTable {
		names[spec.id] = strings.ToLower(spec.upper)
	}
	return names
}

// ServerStats are the protocol front's counters, read from atomics.
type ServerStats struct {
	ConnectedClients    int64
	TotalConnections    int64
	RejectedConnections int64 // refused at accept: --max-clients, protected mode, shutdown
	TotalCommands       int64
	Commands            []int64 // by command, indexed like CommandNames()
	Errors              [numErrorKinds]int64
}

// counters are the Server's atomics. Per-command counts are added once per
// pipeline from a connection-local tally, not once per command, so the hot
// path does not bounce a shared cache line between cores.
type counters struct {
	connected  atomic.Int64
	totalConns atomic.Int64
	rejected   atomic.Int64
	totalCmds  atomic.Int64
	commands   [numCommands]atomic.Int64
	errors     [numErrorKinds]atomic.Int64
}

// Stats returns the protocol front's counters.
func (s *Server) Stats() ServerStats {
	st := ServerStats{
		ConnectedClients:    s.n.connected.Load(),
		TotalConnections:    s.n.totalConns.Load(),
		RejectedConnections: s.n.rejected.Load(),
		TotalCommands:       s.n.totalCmds.Load(),
		Commands:            make([]int64, numCommands),
	}
	for i := range st.Commands {
		st.Commands[i] = s.n.commands[i].Load()
	}
	for i := range st.Errors {
		st.Errors[i] = s.n.errors[i].Load()
	}
	return st
}

// tally is one connection's counts for the pipeline being executed.
type tally struct {
	commands [numCommands]int32
	errors   [numErrorKinds]int32
	any      bool
}

func (t *tally) command(id cmdID)  { t.commands[id]++; t.any = true }
func (t *tally) error(k ErrorKind) { t.errors[k]++; t.any = true }

// flushTally adds a connection's tally to the shared counters and clears it.
func (s *Server) flushTally(t *tally) {
	if !t.any {
		return
	}
	for i, n := range t.commands {
		if n != 0 {
			s.n.commands[i].Add(int64(n))
			t.commands[i] = 0
		}
	}
	for i, n := range t.errors {
		if n != 0 {
			s.n.errors[i].Add(int64(n))
			t.errors[i] = 0
		}
	}
	t.any = false
}

// countingConn counts every error reply written through it, classified by
// its text, so that no path that answers an error can forget to count it.
// Each session owns one and points it at its redcon.Conn, so passing it as
// a redcon.Conn allocates nothing.
type countingConn struct {
	redcon.Conn
	tally *tally
}

func (c *countingConn) WriteError(msg string) {
	c.tally.error(classifyError(msg))
	c.Conn.WriteError(msg)
}

// classifyError maps an error reply to its kind.
func classifyError(msg string) ErrorKind {
	switch {
	case strings.HasPrefix(msg, "ERR wrong number of arguments"):
		return ErrArity
	case strings.HasPrefix(msg, "ERR unknown command"), strings.HasPrefix(msg, "ERR unknown subcommand"):
		return ErrUnknownCmd
	case strings.HasPrefix(msg, "NOAUTH"), strings.HasPrefix(msg, "WRONGPASS"),
		strings.HasPrefix(msg, "DENIED"), strings.HasPrefix(msg, "ERR AUTH"):
		return ErrAuth
	case strings.HasPrefix(msg, "ERR Protocol error"):
		return ErrProtocol
	case strings.HasPrefix(msg, "ERR server is shutting down"), strings.HasPrefix(msg, "ERR reload failed"),
		strings.HasPrefix(msg, "ERR max number of clients"):
		return ErrUnavailable
	}
	return ErrInvalidArg
}
