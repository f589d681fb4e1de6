package command

import (
	"errors"
	"strconv"
	"strings"

	"github.com/bucketd/bucketd/internal/decide"
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

// errorReply is an error reply to a command: the text the client gets and
// the kind it is counted as in INFO and the metrics. Each reply carries its
// kind from where it is made, so nothing has to work the kind out from the
// text. Fixed replies are the package variables below, built once, so a bad
// request costs no allocation; the others are built by the functions that
// follow them, which quote the client's input.
type errorReply struct {
	text string
	kind ErrorKind
}

// Replies to bad arguments.
var (
	errInvalidCapacity  = &errorReply{"ERR invalid capacity: must be a finite number > 0", ErrInvalidArg}
	errCapacityTooLarge = &errorReply{"ERR invalid capacity: must be at most 1e15", ErrInvalidArg}
	errInvalidRate      = &errorReply{"ERR invalid rate: must be a finite number > 0", ErrInvalidArg}
	errRateTooLarge     = &errorReply{"ERR invalid rate: must be at most 1e15", ErrInvalidArg}
	errInvalidCost      = &errorReply{"ERR invalid cost: must be a finite number >= 0", ErrInvalidArg}
	errCostTooLarge     = &errorReply{"ERR invalid cost: must be at most 1e15", ErrInvalidArg}
	errKeyTooLong       = &errorReply{"ERR key too long", ErrInvalidArg}
	errSyntax           = &errorReply{"ERR syntax error", ErrInvalidArg}
	errNotInteger       = &errorReply{"ERR value is not an integer or out of range", ErrInvalidArg}
	errDBIndex          = &errorReply{"ERR DB index is out of range", ErrInvalidArg}
	errNoProto          = &errorReply{"NOPROTO unsupported protocol version", ErrInvalidArg}
	errProtoVersion     = &errorReply{"ERR Protocol version is not an integer or out of range", ErrInvalidArg}
	errClientName       = &errorReply{"ERR Client names cannot contain spaces, newlines or special characters.", ErrInvalidArg}
	errWrongType        = &errorReply{"WRONGTYPE Operation against a key holding the wrong kind of value (CL.THROTTLE and TB.* keys cannot be mixed)", ErrInvalidArg}
	errThrottleBurst    = &errorReply{"ERR invalid max_burst: must be an integer >= 0", ErrInvalidArg}
	errThrottleCount    = &errorReply{"ERR invalid count per period: must be an integer >= 1", ErrInvalidArg}
	errThrottlePeriod   = &errorReply{"ERR invalid period: must be an integer number of seconds >= 1", ErrInvalidArg}
	errThrottleQuantity = &errorReply{"ERR invalid quantity: must be an integer >= 0", ErrInvalidArg}
	errThrottleRange    = &errorReply{"ERR CL.THROTTLE parameters too large: period × (max_burst+1) or period × quantity overflows", ErrInvalidArg}
	errNoReloadConfig   = &errorReply{"ERR CONFIG RELOAD needs a configuration file: start bucketd with --config", ErrInvalidArg}
)

// Replies to bad arguments of TB.MACQUIRE: those that concern one bucket
// name it by its position, from 1, as written (policies.go, macquire.go).
// Built once, so a bad request costs no allocation (but for an unknown
// policy, whose name is quoted).
var (
	errNumBuckets     = &errorReply{"ERR invalid numbuckets: must be an integer from 1 to " + strconv.Itoa(maxGroup), ErrInvalidArg}
	errTooManyBuckets = &errorReply{"ERR too many buckets: one call checks at most " + strconv.Itoa(maxGroup) +
		" buckets, and the limits of the policies named make more: name fewer buckets or policies with fewer limits", ErrInvalidArg}
	errMissingBucketAt    = positional("ERR bucket ", " is missing: give numbuckets times key capacity rate (or key POLICY name), then COST cost and WITHINFO if wanted")
	errKeyTooLongAt       = positional("ERR key too long for bucket ", "")
	errSameKeyAt          = positional("ERR bucket ", " repeats the key of an earlier bucket (keys a policy derives count): give each bucket a key of its own")
	errInvalidCapacityAt  = positional("ERR invalid capacity for bucket ", ": must be a finite number > 0")
	errCapacityTooLargeAt = positional("ERR invalid capacity for bucket ", ": must be at most 1e15")
	errInvalidRateAt      = positional("ERR invalid rate for bucket ", ": must be a finite number > 0")
	errRateTooLargeAt     = positional("ERR invalid rate for bucket ", ": must be at most 1e15")
)

// positional builds one reply per bucket position: before, the position
// (1 to maxGroup), after.
func positional(before, after string) *[maxGroup]*errorReply {
	var r [maxGroup]*errorReply
	for i := range r {
		r[i] = &errorReply{before + strconv.Itoa(i+1) + after, ErrInvalidArg}
	}
	return &r
}

// Replies of CLIENT TRACKING and CLIENT CACHING, worded as Redis 7.2 words
// them, except errRedirectElsewhere: Redis would send the invalidations to
// that connection, which bucketd cannot do (see tracking.go).
var (
	errRedirectMissing   = &errorReply{"ERR The client ID you want redirect to does not exist", ErrInvalidArg}
	errRedirectTwice     = &errorReply{"ERR A client can only redirect to a single other client", ErrInvalidArg}
	errRedirectElsewhere = &errorReply{"ERR bucketd cannot deliver invalidation messages to another connection: turn tracking on, without REDIRECT, on the connection that reads (RESP3, HELLO 3)", ErrInvalidArg}
	errPrefixNeedsBcast  = &errorReply{"ERR PREFIX option requires BCAST mode to be enabled", ErrInvalidArg}
	errBcastSwitch       = &errorReply{"ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.", ErrInvalidArg}
	errBcastOptIn        = &errorReply{"ERR OPTIN and OPTOUT are not compatible with BCAST", ErrInvalidArg}
	errOptInAndOut       = &errorReply{"ERR You can't specify both OPTIN mode and OPTOUT mode", ErrInvalidArg}
	errOptSwitch         = &errorReply{"ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.", ErrInvalidArg}
	errCachingOff        = &errorReply{"ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled", ErrInvalidArg}
	errCachingYes        = &errorReply{"ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.", ErrInvalidArg}
	errCachingNo         = &errorReply{"ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.", ErrInvalidArg}
	errTooManyPrefixes   = &errorReply{"ERR too many BCAST prefixes: a connection may have at most " + strconv.Itoa(maxPrefixes) +
		" prefixes of " + strconv.Itoa(maxPrefixBytes) + " bytes in all; track fewer or shorter prefixes (CLIENT TRACKING OFF forgets them)", ErrInvalidArg}
)

// Replies of the security layer, worded as Redis 7 words them.
var (
	errNoAuth        = &errorReply{"NOAUTH Authentication required.", ErrAuth}
	errHelloNoAuth   = &errorReply{"NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time", ErrAuth}
	errWrongPass     = &errorReply{"WRONGPASS invalid username-password pair or user is disabled.", ErrAuth}
	errNoPasswordSet = &errorReply{"ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?", ErrAuth}
)

// Replies of MULTI, EXEC, DISCARD and WATCH, worded as Redis 7.2 words
// them, except errWatchUnsupported: bucketd has no WATCH.
var (
	errExecNoMulti    = &errorReply{"ERR EXEC without MULTI", ErrInvalidArg}
	errDiscardNoMulti = &errorReply{"ERR DISCARD without MULTI", ErrInvalidArg}
	errMultiNested    = &errorReply{"ERR MULTI calls can not be nested", ErrInvalidArg}
	errWatchInMulti   = &errorReply{"ERR WATCH inside MULTI is not allowed", ErrInvalidArg}
	errExecAbort      = &errorReply{"EXECABORT Transaction discarded because of previous errors.", ErrInvalidArg}
	// Redis Cluster's own words for keys of one call in different slots
	// (a transaction's, or a TB.MACQUIRE group's, in store mode).
	errCrossSlot        = &errorReply{"CROSSSLOT Keys in request don't hash to the same slot", ErrInvalidArg}
	errWatchUnsupported = &errorReply{"ERR WATCH is not supported by bucketd: a bucket changes with time alone, so a watched bucket would always count as changed. " +
		"Send MULTI ... EXEC without WATCH: EXEC runs the queued commands with no other client's command in between", ErrInvalidArg}
)

// execAborted is Redis's reply to an EXEC that is itself refused (a wrong
// number of arguments, NOAUTH): the refusal, without its "ERR " prefix,
// after "EXECABORT Transaction discarded because of: ". It keeps e's kind.
func execAborted(e *errorReply) *errorReply {
	return &errorReply{"EXECABORT Transaction discarded because of: " + strings.TrimPrefix(e.text, "ERR "), e.kind}
}

// txTooLong is the reply to a command that would make a transaction hold
// more than maxCmds commands or maxBytes bytes (see transaction.go).
func txTooLong(maxCmds, maxBytes int) *errorReply {
	return &errorReply{"ERR too many commands queued: a transaction holds at most " + strconv.Itoa(maxCmds) + " commands and " +
		strconv.Itoa(maxBytes) + " bytes (--max-query-bytes); EXEC will discard it (EXECABORT): split it into smaller transactions", ErrInvalidArg}
}

// errNotCacheable answers a bucket command the client asked to cache
// (CLIENT TRACKING ON OPTIN, then CLIENT CACHING YES): see tracking.go.
var errNotCacheable = &errorReply{"ERR TB.* and CL.THROTTLE replies depend on time and must not be cached: " +
	"send the command without CLIENT CACHING YES (with rueidis: Do, not DoCache)", ErrInvalidArg}

// Replies when the store cannot answer.
var (
	errShuttingDown     = &errorReply{"ERR server is shutting down, retry on another instance", ErrUnavailable}
	errNotApplied       = &errorReply{"ERR the Redis store did not answer: TB.RESET may not have been applied", ErrUnavailable}
	errThrottleNotStore = &errorReply{"ERR CL.THROTTLE is not available in Redis store mode; use TB.ACQUIRE", ErrUnavailable}
)

// wrongArity is the reply to a command or subcommand called with the wrong
// number of arguments; name is as COMMAND shows it ("client|setname"). The
// command table builds each one once.
func wrongArity(name string) *errorReply {
	return &errorReply{"ERR wrong number of arguments for '" + name + "' command", ErrArity}
}

// unknownCommand words the reply as Redis 7 does, quoting at most about
// 128 bytes of the name and of the arguments.
func unknownCommand(args [][]byte) *errorReply {
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
	return &errorReply{b.String(), ErrUnknownCmd}
}

// unknownSubcommand is the reply to a subcommand the command (its name in
// upper case) does not have.
func unknownSubcommand(sub []byte, command string) *errorReply {
	return &errorReply{"ERR unknown subcommand '" + truncate(sub) + "'. Try " + command + " HELP.", ErrUnknownCmd}
}

func helloOptionError(opt []byte) *errorReply {
	return &errorReply{"ERR Syntax error in HELLO option '" + truncate(opt) + "'", ErrInvalidArg}
}

// prefixOverlap is CLIENT TRACKING's reply to a BCAST prefix p that
// overlaps q; which is "an existing" or "another provided". It quotes at
// most 128 bytes of each, as every echoed argument.
func prefixOverlap(p, q []byte, which string) *errorReply {
	return &errorReply{"ERR Prefix '" + truncate(p) + "' overlaps with " + which + " prefix '" + truncate(q) +
		"'. Prefixes for a single client must not overlap.", ErrInvalidArg}
}

func unrecognizedOption(opt []byte) *errorReply {
	return &errorReply{"ERR Unrecognized option '" + truncate(opt) + "'", ErrInvalidArg}
}

func unknownPolicy(name []byte) *errorReply {
	return &errorReply{"ERR unknown policy '" + truncate(name) + "': define it under policies: in the --config file", ErrInvalidArg}
}

// unknownPolicyAt is unknownPolicy for the bucket at position i (from 0)
// of TB.MACQUIRE.
func unknownPolicyAt(name []byte, i int) *errorReply {
	return &errorReply{"ERR unknown policy '" + truncate(name) + "' for bucket " + strconv.Itoa(i+1) +
		": define it under policies: in the --config file", ErrInvalidArg}
}

func reloadFailed(err error) *errorReply {
	return &errorReply{"ERR reload failed, the running configuration stays: " + err.Error(), ErrUnavailable}
}

// truncate returns at most the first 128 bytes of b, as Redis quotes
// arguments in error replies.
func truncate(b []byte) string { return string(b[:min(len(b), 128)]) }

// answerErrors maps the errors a store's answer can carry to their replies;
// any other error is the store failing (Redis down) and is quoted.
var answerErrors = [...]struct {
	err   error
	reply *errorReply
}{
	{decide.ErrWrongType, errWrongType},
	{decide.ErrNotApplied, errNotApplied},
	{decide.ErrUnsupported, errThrottleNotStore},
	{decide.ErrCrossSlot, errCrossSlot},
}

// answerError returns the reply to the first error among one command's
// answers, or nil when there is none.
func answerError(answers []decide.Answer) *errorReply {
	for i := range answers {
		err := answers[i].Err
		if err == nil {
			continue
		}
		for _, m := range answerErrors {
			if errors.Is(err, m.err) {
				return m.reply
			}
		}
		return &errorReply{"ERR " + err.Error(), ErrUnavailable}
	}
	return nil
}
