package command

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/bucketd/bucketd/internal/decide"
	"github.com/bucketd/bucketd/internal/resp/wire"
)

// errorDelta runs one command on a fresh bench connection and returns its
// reply and how the error counters moved.
func errorDelta(t *testing.T, srv *Engine, c *bufConn, args ...string) (string, [numErrorKinds]int64) {
	t.Helper()
	before := srv.Stats().Errors
	c.out = c.out[:0]
	srv.handle(c, command(args...))
	after := srv.Stats().Errors
	var d [numErrorKinds]int64
	for i := range d {
		d[i] = after[i] - before[i]
	}
	return string(c.out), d
}

// onlyKind reports whether d counts exactly one error, of kind k.
func onlyKind(d [numErrorKinds]int64, k ErrorKind) bool {
	var total int64
	for _, n := range d {
		total += n
	}
	return total == 1 && d[k] == 1
}

// TestWrongArityForEveryCommand: every command and subcommand that can be
// called with a wrong number of arguments answers as Redis words it, with
// the name Redis uses (subcommands as "parent|sub"), counted once as arity.
func TestWrongArityForEveryCommand(t *testing.T) {
	cases := []struct {
		name string // as in the reply
		args string // space-separated
	}{
		{"tb.acquire", "TB.ACQUIRE k 10"},
		{"tb.acquire", "tb.acquire k 10 1 1 WITHINFO x"},
		{"tb.macquire", "TB.MACQUIRE 1 k 10"},
		{"tb.peek", "TB.PEEK k 10"},
		{"tb.peek", "TB.PEEK k 10 1 1 WITHINFO"},
		{"tb.reset", "TB.RESET"},
		{"cl.throttle", "CL.THROTTLE k 1 1"},
		{"cl.throttle", "CL.THROTTLE k 1 1 1 1 1"},
		{"ping", "PING a b"},
		{"echo", "ECHO"},
		{"echo", "ECHO a b"},
		{"select", "SELECT"},
		{"select", "SELECT 0 0"},
		{"client", "CLIENT"},
		{"client|setname", "CLIENT SETNAME"},
		{"client|setname", "client setname a b"},
		{"client|getname", "CLIENT GETNAME x"},
		{"client|id", "CLIENT ID x"},
		{"client|setinfo", "CLIENT SETINFO LIB-NAME"},
		{"client|setinfo", "CLIENT SETINFO LIB-NAME a b"},
		{"client|tracking", "CLIENT TRACKING"},
		{"client|caching", "CLIENT CACHING"},
		{"client|caching", "CLIENT CACHING YES NO"},
		{"client|trackinginfo", "CLIENT TRACKINGINFO x"},
		{"client|getredir", "CLIENT GETREDIR x"},
		{"client|no-evict", "CLIENT NO-EVICT"},
		{"client|no-touch", "CLIENT NO-TOUCH ON OFF"},
		{"client|info", "CLIENT INFO x"},
		{"client|kill", "CLIENT KILL"},
		{"client|help", "CLIENT HELP x"},
		{"command|help", "COMMAND HELP x"},
		{"config|help", "CONFIG HELP x"},
		{"slowlog", "SLOWLOG"},
		{"slowlog|get", "SLOWLOG GET 1 2"},
		{"slowlog|len", "SLOWLOG LEN x"},
		{"slowlog|reset", "SLOWLOG RESET x"},
		{"slowlog|help", "SLOWLOG HELP x"},
		{"monitor", "MONITOR x"},
		{"time", "TIME x"},
		{"dbsize", "DBSIZE x"},
		{"config", "CONFIG"},
		{"config|get", "CONFIG GET"},
		{"config|reload", "CONFIG RELOAD now"},
		{"auth", "AUTH"},
		{"auth", "AUTH default pw x"},
		{"multi", "MULTI x"},
		{"discard", "DISCARD x"},
		{"watch", "WATCH"},
		{"unwatch", "UNWATCH x"},
		{"exec", "EXEC x"},
	}
	covered := map[string]bool{}
	for _, tc := range cases {
		srv, c := newBenchServer(t)
		reply, d := errorDelta(t, srv, c, strings.Fields(tc.args)...)
		want := "-ERR wrong number of arguments for '" + tc.name + "' command\r\n"
		if tc.name == "exec" { // a refused EXEC is an EXECABORT in Redis
			want = "-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command\r\n"
		}
		if reply != want || !onlyKind(d, ErrArity) {
			t.Errorf("%s: reply %q, counted %v; want %q counted once as arity", tc.args, reply, d, want)
		}
		covered[tc.name] = true
	}
	// A command or subcommand added to the table with a bounded number of
	// arguments must be added above.
	var check func(cmds []commandSpec, sub bool)
	check = func(cmds []commandSpec, sub bool) {
		for i := range cmds {
			cmd := &cmds[i]
			least := max(cmd.arity, -cmd.arity)
			bounded := cmd.arity >= 0 || cmd.maxArgs > 0 || least > 1 && !sub || least > 2
			if bounded && !covered[cmd.name] {
				t.Errorf("no wrong-arity case for %s", cmd.name)
			}
			check(cmd.subs, true)
		}
	}
	check(commandTable, false)
}

// TestArityBoundsAccepted: the fewest and the most arguments each command
// takes get past the arity check.
func TestArityBoundsAccepted(t *testing.T) {
	for _, args := range []string{
		"TB.ACQUIRE k 10 1", "TB.ACQUIRE k 10 1 1 WITHINFO", "TB.PEEK k 10 1", "TB.PEEK k 10 1 1",
		"TB.RESET k", "CL.THROTTLE k 1 1 1", "CL.THROTTLE k 1 1 1 1", "PING", "PING a", "ECHO a",
		"SELECT 0", "QUIT x y", "HELLO", "CLIENT SETNAME a", "CLIENT GETNAME", "CLIENT ID",
		"CLIENT SETINFO LIB-VER 1", "CLIENT TRACKING OFF", "CLIENT TRACKING ON BCAST PREFIX a PREFIX b NOLOOP",
		"CLIENT TRACKINGINFO", "CLIENT GETREDIR", "CLIENT NO-EVICT ON", "CLIENT NO-TOUCH off", "COMMAND", "COMMAND COUNT", "COMMAND COUNT x", "COMMAND LIST x",
		"COMMAND INFO", "COMMAND DOCS", "INFO", "INFO a b", "DBSIZE", "CONFIG GET a b",
	} {
		srv, c := newBenchServer(t)
		if reply, _ := errorDelta(t, srv, c, strings.Fields(args)...); strings.HasPrefix(reply, "-") {
			t.Errorf("%s: %q", args, reply)
		}
	}
}

// answerCaller answers every request with err, or fails the whole Run.
type answerCaller struct {
	n      int
	err    error
	runErr error
}

func (c *answerCaller) Add(decide.Request)           { c.n++ }
func (c *answerCaller) AddAll(reqs []decide.Request) { c.n += len(reqs) }
func (c *answerCaller) Run() ([]decide.Answer, error) {
	a := make([]decide.Answer, c.n)
	for i := range a {
		a[i].Err = c.err
	}
	c.n = 0
	return a, c.runErr
}
func (c *answerCaller) RunIsolated() ([]decide.Answer, error) { return c.Run() }

// TestErrorRepliesCarryTextAndKind: each error reply reaches the client with
// its text and is counted once under its kind.
func TestErrorRepliesCarryTextAndKind(t *testing.T) {
	long := strings.Repeat("k", DefaultMaxKeyBytes+1)
	cases := []struct {
		setup func(*Engine, *session)
		args  string
		want  string
		kind  ErrorKind
	}{
		{nil, "TB.ACQUIRE k x 1", errInvalidCapacity.text, ErrInvalidArg},
		{nil, "TB.ACQUIRE k 2e15 1", errCapacityTooLarge.text, ErrInvalidArg},
		{nil, "TB.ACQUIRE k 1 0 1", errInvalidRate.text, ErrInvalidArg},
		{nil, "TB.ACQUIRE k 1 2e15", errRateTooLarge.text, ErrInvalidArg},
		{nil, "TB.PEEK k 1 1 -1", errInvalidCost.text, ErrInvalidArg},
		{nil, "TB.ACQUIRE k 1 1 2e15", errCostTooLarge.text, ErrInvalidArg},
		{nil, "TB.RESET a " + long, errKeyTooLong.text, ErrInvalidArg},
		{nil, "TB.ACQUIRE k 1 1 1 1", errSyntax.text, ErrInvalidArg},
		{nil, "TB.ACQUIRE k POLICY nope", "ERR unknown policy 'nope': define it under policies: in the --config file", ErrInvalidArg},
		{nil, "CL.THROTTLE k -1 1 1", errThrottleBurst.text, ErrInvalidArg},
		{nil, "CL.THROTTLE k 1 0 1", errThrottleCount.text, ErrInvalidArg},
		{nil, "CL.THROTTLE k 1 1 0", errThrottlePeriod.text, ErrInvalidArg},
		{nil, "CL.THROTTLE k 1 1 1 -1", errThrottleQuantity.text, ErrInvalidArg},
		{nil, "CL.THROTTLE k 999999999999999999 1 999999999999999999", errThrottleRange.text, ErrInvalidArg},
		{nil, "SELECT x", errNotInteger.text, ErrInvalidArg},
		{nil, "SELECT 1", errDBIndex.text, ErrInvalidArg},
		{nil, "HELLO 4", errNoProto.text, ErrInvalidArg},
		{nil, "HELLO 1", errNoProto.text, ErrInvalidArg},
		{nil, "HELLO x", errProtoVersion.text, ErrInvalidArg},
		{nil, "HELLO 2 FOO", "ERR Syntax error in HELLO option 'FOO'", ErrInvalidArg},
		{nil, "CLIENT SETNAME \x01", errClientName.text, ErrInvalidArg},
		{nil, "CLIENT SETINFO LIB-FOO x", "ERR Unrecognized option 'LIB-FOO'", ErrInvalidArg},
		{nil, "CLIENT TRACKING ON REDIRECT 99", errRedirectMissing.text, ErrInvalidArg},
		{nil, "CLIENT TRACKING ON PREFIX a", errPrefixNeedsBcast.text, ErrInvalidArg},
		{nil, "CLIENT TRACKING ON BCAST PREFIX a PREFIX a", "ERR Prefix 'a' overlaps with another provided prefix 'a'. Prefixes for a single client must not overlap.", ErrInvalidArg},
		{nil, "CLIENT CACHING YES", errCachingOff.text, ErrInvalidArg},
		{nil, "CLIENT NO-EVICT maybe", errSyntax.text, ErrInvalidArg},
		{nil, "CLIENT MAINT_NOTIFICATIONS ON moving-endpoint-type internal-ip", "ERR unknown subcommand 'MAINT_NOTIFICATIONS'. Try CLIENT HELP.", ErrUnknownCmd},
		{nil, "CONFIG RELOAD", errNoReloadConfig.text, ErrInvalidArg},
		{nil, "CLIENT FLY", "ERR unknown subcommand 'FLY'. Try CLIENT HELP.", ErrUnknownCmd},
		{nil, "COMMAND fly", "ERR unknown subcommand 'fly'. Try COMMAND HELP.", ErrUnknownCmd},
		{nil, "CONFIG SET a b", "ERR unknown subcommand 'SET'. Try CONFIG HELP.", ErrUnknownCmd},
		{nil, "NOSUCH a b", "ERR unknown command 'NOSUCH', with args beginning with: 'a' 'b' ", ErrUnknownCmd},
		{nil, "AUTH x", errNoPasswordSet.text, ErrAuth},
		{nil, "AUTH bob x", errWrongPass.text, ErrAuth},
		{nil, "HELLO 2 AUTH bob x", errWrongPass.text, ErrAuth},
		{locked, "TB.ACQUIRE k 10 1", errNoAuth.text, ErrAuth},
		{locked, "NOSUCH", errNoAuth.text, ErrAuth},
		{locked, "HELLO 2", errHelloNoAuth.text, ErrAuth},
		{reloadFails, "CONFIG RELOAD", "ERR reload failed, the running configuration stays: bad file", ErrUnavailable},
		{answers(decide.ErrWrongType, nil), "TB.ACQUIRE k 10 1", errWrongType.text, ErrInvalidArg},
		{answers(decide.ErrNotApplied, nil), "TB.RESET k", errNotApplied.text, ErrUnavailable},
		{answers(decide.ErrUnsupported, nil), "CL.THROTTLE k 1 1 1", errThrottleNotStore.text, ErrUnavailable},
		{answers(errors.New("redis: connection refused"), nil), "TB.PEEK k 10 1", "ERR redis: connection refused", ErrUnavailable},
		{answers(nil, errors.New("closed")), "TB.ACQUIRE k 10 1", errShuttingDown.text, ErrUnavailable},
	}
	for _, tc := range cases {
		srv, c := newBenchServer(t)
		if tc.setup != nil {
			tc.setup(srv, c.sess)
		}
		reply, d := errorDelta(t, srv, c, strings.Fields(tc.args)...)
		if want := "-" + tc.want + "\r\n"; reply != want || !onlyKind(d, tc.kind) {
			t.Errorf("%.40s: reply %q, counted %v; want %q counted once as %s", tc.args, reply, d, want, ErrorKinds[tc.kind])
		}
	}
}

func locked(srv *Engine, sess *session) {
	srv.password = newPasswordCheck("secret")
	sess.authed = false
}

func reloadFails(srv *Engine, _ *session) {
	srv.cfg.Reload = func() ([]string, error) { return nil, errors.New("bad file") }
}

func answers(err, runErr error) func(*Engine, *session) {
	return func(_ *Engine, sess *session) { sess.pipe.caller = &answerCaller{err: err, runErr: runErr} }
}

// TestFixedErrorRepliesAllocateNothing: a fixed error reply, the
// wrong-arity ones included, costs no allocation.
func TestFixedErrorRepliesAllocateNothing(t *testing.T) {
	srv, c := newBenchServer(t)
	for _, cmd := range []wire.Command{
		command("TB.ACQUIRE", "k", "10"),
		command("TB.ACQUIRE", "k", "10", "1", "1", "1"),
		command("CL.THROTTLE", "k", "x", "1", "1"),
		command("ECHO"),
		command("CLIENT", "SETNAME"),
	} {
		allocs := testing.AllocsPerRun(1000, func() {
			c.out = c.out[:0]
			srv.handle(c, cmd)
		})
		if allocs != 0 {
			t.Errorf("%q: %v allocations, want 0", cmd.Args, allocs)
		}
	}
}

// TestCommandReplyUnchanged pins COMMAND COUNT, COMMAND LIST and one COMMAND
// INFO entry, which client libraries read at start.
func TestCommandReplyUnchanged(t *testing.T) {
	srv, c := newBenchServer(t)
	reply, _ := errorDelta(t, srv, c, "COMMAND", "COUNT")
	if reply != ":24\r\n" {
		t.Errorf("COMMAND COUNT: %q", reply)
	}
	reply, _ = errorDelta(t, srv, c, "COMMAND", "LIST")
	names := "tb.acquire tb.macquire tb.peek tb.reset cl.throttle ping echo quit select hello client command info dbsize config auth multi exec discard watch unwatch slowlog monitor time"
	var want strings.Builder
	fmt.Fprintf(&want, "*24\r\n")
	for _, n := range strings.Fields(names) {
		fmt.Fprintf(&want, "$%d\r\n%s\r\n", len(n), n)
	}
	if reply != want.String() {
		t.Errorf("COMMAND LIST: %q", reply)
	}
	reply, _ = errorDelta(t, srv, c, "COMMAND", "INFO", "tb.reset", "nosuch", "Config")
	wantInfo := "*3\r\n" +
		"*10\r\n$8\r\ntb.reset\r\n:-2\r\n*1\r\n+write\r\n:1\r\n:-1\r\n:1\r\n*0\r\n*0\r\n*0\r\n*0\r\n" +
		"$-1\r\n" +
		"*10\r\n$6\r\nconfig\r\n:-2\r\n*3\r\n+admin\r\n+loading\r\n+stale\r\n:0\r\n:0\r\n:0\r\n*0\r\n*0\r\n*0\r\n*0\r\n"
	if reply != wantInfo {
		t.Errorf("COMMAND INFO: %q", reply)
	}
}
