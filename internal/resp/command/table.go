package command

import (
	"slices"
	"strings"

	"github.com/bucketd/bucketd/internal/resp/wire"
)

// cmdID names a command in the per-command counters: its position in
// commandTable, from 1; idUnknown counts the names the table does not
// list. Subcommands have none: they count under their command.
type cmdID uint8

const (
	idUnknown cmdID = 0
	// maxCmdIDs bounds the cmdIDs, so that a connection's tally is an
	// array (init checks that the table fits).
	maxCmdIDs = 64
)

// commandSpec is one entry of the command table: what COMMAND reports
// about a command, how many arguments it takes, and what answers it. A
// bucket command has a planner, which queues its requests for the shards;
// any other command has a handler, which answers at once; a command with
// subcommands (CLIENT, COMMAND, CONFIG) hands them over, and its handler,
// if any, answers the form without a subcommand. Planners and handlers
// return an error reply, or nil when they have planned or written their
// reply; they run only after the table's checks (authentication, arity,
// subcommand), so they never check the number of arguments again.
type commandSpec struct {
	upper string // the name as sent, in upper case, for case-insensitive matching
	arity int    // Redis convention, name included: n means exactly n, -n at least n
	// maxArgs, when arity is -n, is the most arguments taken (name
	// included); more get the wrong-arity reply. 0 means no limit.
	maxArgs int
	flags   []string
	keys    keyRange
	// atOnce: between MULTI and EXEC the command acts at once instead of
	// being queued (MULTI, EXEC, DISCARD, WATCH and QUIT, as in Redis).
	atOnce bool

	plan func(p *pipeline, args [][]byte) *errorReply
	run  func(s *session, args [][]byte) *errorReply
	subs []commandSpec

	// Filled in from the fields above when the table is built.
	id          cmdID       // the position in commandTable, from 1; 0 for subcommands
	row         statRow     // the row in the per-command statistics (cmdstats.go)
	skipSlowlog bool        // the "skip_slowlog" flag: never in SLOWLOG (EXEC)
	skipMonitor bool        // admin commands and MONITOR: never shown to monitors, as in Redis
	name        string      // lower case; "parent|sub" for a subcommand
	noAuth      bool        // the "noauth" flag: answered before AUTH
	wrongArity  *errorReply // the reply to a wrong number of arguments
}

// keyRange says which arguments are keys, as COMMAND reports it: the first
// and last key positions (-1: the last argument) and the step between keys.
// With triples the keys are every third argument from the second,
// numbuckets (the first) of them (TB.MACQUIRE); COMMAND then reports
// 0 0 0, as Redis does for the keys of commands whose keys depend on their
// arguments (flag movablekeys).
type keyRange struct {
	first, last, step int
	triples           bool
}

// commandTable lists the commands, the bucket commands first: lookup tries
// them first, and they are the hot path. A command's place in it is its
// cmdID. It is built by init because the COMMAND handlers read it.
var commandTable []commandSpec

func init() {
	oneKey := keyRange{first: 1, last: 1, step: 1}
	txFlags := []string{"noscript", "loading", "stale", "fast", "allow_busy"} // Redis 7's
	commandTable = []commandSpec{
		{upper: "TB.ACQUIRE", arity: -4, maxArgs: 6, flags: []string{"write", "fast"}, keys: oneKey, plan: planAcquire},
		{upper: "TB.MACQUIRE", arity: -5, flags: []string{"write", "fast", "movablekeys"}, keys: keyRange{triples: true}, plan: planMAcquire},
		{upper: "TB.PEEK", arity: -4, maxArgs: 5, flags: []string{"readonly", "fast"}, keys: oneKey, plan: planPeek},
		{upper: "TB.RESET", arity: -2, flags: []string{"write"}, keys: keyRange{first: 1, last: -1, step: 1}, plan: planReset},
		{upper: "CL.THROTTLE", arity: -5, maxArgs: 6, flags: []string{"write", "fast"}, keys: oneKey, plan: planThrottle},
		{upper: "PING", arity: -1, maxArgs: 2, flags: []string{"fast", "stale"}, run: cmdPing},
		{upper: "ECHO", arity: 2, flags: []string{"fast"}, run: cmdEcho},
		{upper: "QUIT", arity: -1, flags: []string{"fast", "noauth"}, atOnce: true, run: cmdQuit},
		{upper: "SELECT", arity: 2, flags: []string{"fast", "loading"}, run: cmdSelect},
		{upper: "HELLO", arity: -1, flags: []string{"fast", "noauth"}, run: cmdHello},
		{upper: "CLIENT", arity: -2, flags: []string{"fast"}, subs: []commandSpec{
			{upper: "SETNAME", arity: 3, run: cmdClientSetName},
			{upper: "GETNAME", arity: 2, run: cmdClientGetName},
			{upper: "ID", arity: 2, run: cmdClientID},
			{upper: "SETINFO", arity: 4, run: cmdClientSetInfo},
			{upper: "TRACKING", arity: -3, run: cmdClientTracking},
			{upper: "CACHING", arity: 3, run: cmdClientCaching},
			{upper: "TRACKINGINFO", arity: 2, run: cmdClientTrackingInfo},
			{upper: "GETREDIR", arity: 2, run: cmdClientGetRedir},
			{upper: "NO-EVICT", arity: 3, run: cmdClientOnOff},
			{upper: "NO-TOUCH", arity: 3, run: cmdClientOnOff},
			{upper: "LIST", arity: -2, flags: []string{"admin"}, run: cmdClientList},
			{upper: "INFO", arity: 2, run: cmdClientInfo},
			{upper: "KILL", arity: -3, flags: []string{"admin"}, run: cmdClientKill},
			{upper: "HELP", arity: 2, run: cmdClientHelp},
		}},
		// The subcommands of COMMAND ignore extra arguments (no FILTERBY).
		{upper: "COMMAND", arity: -1, flags: []string{"loading", "stale"}, run: cmdCommand, subs: []commandSpec{
			{upper: "COUNT", arity: -2, run: cmdCommandCount},
			{upper: "LIST", arity: -2, run: cmdCommandList},
			{upper: "INFO", arity: -2, run: cmdCommandInfo},
			{upper: "DOCS", arity: -2, run: cmdCommandDocs},
			{upper: "HELP", arity: 2, run: cmdCommandHelp},
		}},
		{upper: "INFO", arity: -1, flags: []string{"loading", "stale"}, run: cmdInfo},
		{upper: "DBSIZE", arity: 1, flags: []string{"readonly", "fast"}, run: cmdDBSize},
		{upper: "CONFIG", arity: -2, flags: []string{"admin", "loading", "stale"}, subs: []commandSpec{
			{upper: "GET", arity: -3, run: cmdConfigGet},
			{upper: "RELOAD", arity: 2, run: cmdConfigReload},
			{upper: "HELP", arity: 2, run: cmdConfigHelp},
		}},
		{upper: "AUTH", arity: -2, maxArgs: 3, flags: []string{"fast", "noauth"}, run: cmdAuth},
		{upper: "MULTI", arity: 1, flags: txFlags, atOnce: true, run: cmdMulti},
		{upper: "EXEC", arity: 1, flags: []string{"noscript", "loading", "stale", "skip_slowlog"}, atOnce: true, run: cmdExec},
		{upper: "DISCARD", arity: 1, flags: txFlags, atOnce: true, run: cmdDiscard},
		{upper: "WATCH", arity: -2, flags: txFlags, keys: keyRange{first: 1, last: -1, step: 1}, atOnce: true, run: cmdWatch},
		{upper: "UNWATCH", arity: 1, flags: txFlags, run: cmdUnwatch},
		{upper: "SLOWLOG", arity: -2, flags: []string{"admin", "loading", "stale"}, subs: []commandSpec{
			{upper: "GET", arity: -2, maxArgs: 3, run: cmdSlowlogGet},
			{upper: "LEN", arity: 2, run: cmdSlowlogLen},
			{upper: "RESET", arity: 2, run: cmdSlowlogReset},
			{upper: "HELP", arity: 2, run: cmdSlowlogHelp},
		}},
		{upper: "MONITOR", arity: 1, flags: []string{"admin", "noscript", "loading", "stale"}, run: cmdMonitor},
		{upper: "TIME", arity: 1, flags: []string{"loading", "stale", "fast"}, run: cmdTime},
	}
	if len(commandTable) >= maxCmdIDs {
		panic("command: more commands than maxCmdIDs")
	}
	statRows = []*commandSpec{nil}
	for i := range commandTable {
		commandTable[i].id = cmdID(i + 1)
		commandTable[i].fill("", false)
	}
	if len(statRows) > maxStatRows {
		panic("command: more commands and subcommands than maxStatRows")
	}
}

// fill derives name, noAuth and wrongArity, for cmd and its subcommands,
// and checks that the entry can answer every call its arity lets through.
func (cmd *commandSpec) fill(parent string, parentAdmin bool) {
	cmd.name = strings.ToLower(cmd.upper)
	if parent != "" {
		cmd.name = parent + "|" + cmd.name
	}
	cmd.row = statRow(len(statRows))
	statRows = append(statRows, cmd)
	cmd.noAuth = slices.Contains(cmd.flags, "noauth")
	cmd.skipSlowlog = slices.Contains(cmd.flags, "skip_slowlog")
	cmd.skipMonitor = parentAdmin || slices.Contains(cmd.flags, "admin")
	cmd.wrongArity = wrongArity(cmd.name)
	switch {
	case cmd.plan != nil && (cmd.run != nil || len(cmd.subs) > 0):
		panic("command: command " + cmd.name + " has a planner and something else")
	case cmd.plan == nil && cmd.run == nil && (len(cmd.subs) == 0 || cmd.arity > -2):
		panic("command: command " + cmd.name + " needs a planner, a handler or, with arity -2 or less, subcommands")
	}
	for i := range cmd.subs {
		cmd.subs[i].fill(cmd.name, cmd.skipMonitor)
	}
}

// unknownEntry answers every name the table does not list. It is not in
// the table: COMMAND does not show it. Its count is "other".
var unknownEntry = commandSpec{id: idUnknown, arity: -1, run: cmdUnknown}

// lookup finds a command (or a subcommand, in table) by name, ignoring
// case, without allocating. It returns nil for an unknown name.
func lookup(table []commandSpec, name []byte) *commandSpec {
	for i := range table {
		if wire.EqualFold(name, table[i].upper) {
			return &table[i]
		}
	}
	return nil
}

// arityOK reports whether n arguments, the name included, suit cmd.
func (cmd *commandSpec) arityOK(n int) bool {
	if cmd.arity >= 0 {
		return n == cmd.arity
	}
	return n >= -cmd.arity && (cmd.maxArgs == 0 || n <= cmd.maxArgs)
}

// resolve finds the entry that answers args and makes the checks every
// command shares, in this order: authentication, the command's arity, the
// subcommand's existence and its arity. It counts the command, whatever the
// outcome. It returns the entry, or the error reply the command gets, and
// the statistics row of the entry reached: a refused call counts there as
// rejected (none for an unknown command or subcommand, as in Redis).
func (s *session) resolve(args [][]byte) (*commandSpec, statRow, *errorReply) {
	cmd := lookup(commandTable, args[0])
	if cmd == nil {
		cmd = &unknownEntry
	}
	s.tally.command(cmd.id)
	switch {
	case !s.authed && !cmd.noAuth:
		return nil, cmd.row, errNoAuth
	case !cmd.arityOK(len(args)):
		return nil, cmd.row, cmd.wrongArity
	case len(cmd.subs) == 0 || len(args) == 1:
		return cmd, cmd.row, nil
	}
	sub := lookup(cmd.subs, args[1])
	switch {
	case sub == nil:
		return nil, 0, unknownSubcommand(args[1], cmd.upper)
	case !sub.arityOK(len(args)):
		return nil, sub.row, sub.wrongArity
	}
	return sub, sub.row, nil
}

// numCommands is the number of cmdIDs in use: the commands, and idUnknown.
func numCommands() int { return len(commandTable) + 1 }

// CommandNames returns the lower-case names of the commands bucketd knows,
// indexed like Stats.Commands; "other" counts unknown commands.
func CommandNames() []string {
	names := make([]string, numCommands())
	names[idUnknown] = "other"
	for i := range commandTable {
		names[commandTable[i].id] = commandTable[i].name
	}
	return names
}
