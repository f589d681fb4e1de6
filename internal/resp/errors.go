package resp

import (
	"errors"

	"github.com/bucketd/bucketd/internal/decide"
)

// Error replies, built once. Every message names the problem; the ones with
// a fixed text are constants so that a bad request costs no allocation.
const (
	errInvalidCapacity  = "ERR invalid capacity: must be a finite number > 0"
	errCapacityTooLarge = "ERR invalid capacity: must be at most 1e15"
	errInvalidRate      = "ERR invalid rate: must be a finite number > 0"
	errRateTooLarge     = "ERR invalid rate: must be at most 1e15"
	errInvalidCost      = "ERR invalid cost: must be a finite number >= 0"
	errCostTooLarge     = "ERR invalid cost: must be at most 1e15"
	errKeyTooLong       = "ERR key too long"
	errSyntax           = "ERR syntax error"
	errNotInteger       = "ERR value is not an integer or out of range"
	errDBIndex          = "ERR DB index is out of range"
	errNoProto          = "NOPROTO unsupported protocol version"
	errProtoVersion     = "ERR Protocol version is not an integer or out of range"
	errShuttingDown     = "ERR server is shutting down, retry on another instance"
	errNoPasswordSet    = "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"
	errClientName       = "ERR Client names cannot contain spaces, newlines or special characters."
	errWrongType        = "WRONGTYPE Operation against a key holding the wrong kind of value (CL.THROTTLE and TB.* keys cannot be mixed)"
	errThrottleBurst    = "ERR invalid max_burst: must be an integer >= 0"
	errThrottleCount    = "ERR invalid count per period: must be an integer >= 1"
	errThrottlePeriod   = "ERR invalid period: must be an integer number of seconds >= 1"
	errThrottleQuantity = "ERR invalid quantity: must be an integer >= 0"
	errThrottleRange    = "ERR CL.THROTTLE parameters too large: period × (max_burst+1) or period × quantity overflows"
)

// Wrong-arity replies, one per command, as Redis words them.
var errArity = map[string]string{}

func arityError(name string) string {
	if e, ok := errArity[name]; ok {
		return e
	}
	return "ERR wrong number of arguments for '" + name + "' command"
}

func init() {
	for _, name := range []string{
		"tb.acquire", "tb.peek", "tb.reset", "cl.throttle", "ping", "echo", "select", "hello",
		"client", "command", "info", "dbsize", "config", "auth", "quit",
		"client|setname", "client|getname", "client|id", "client|setinfo",
		"command|count", "command|info", "config|get", "config|reload",
	} {
		errArity[name] = "ERR wrong number of arguments for '" + name + "' command"
	}
}

// appendErrorLine appends "-msg\r\n", with any CR or LF in msg turned into
// spaces so that a client's bytes echoed in an error cannot break framing.
func appendErrorLine(dst []byte, msg string) []byte {
	dst = append(dst, '-')
	for i := range len(msg) {
		c := msg[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		dst = append(dst, c)
	}
	return append(dst, '\r', '\n')
}

// Replies to the errors a store's answer can carry.
const (
	errNotApplied       = "ERR the Redis store did not answer: TB.RESET may not have been applied"
	errThrottleNotStore = "ERR CL.THROTTLE is not available in Redis store mode; use TB.ACQUIRE"
)

// answerError returns the reply and error kind for the first error among
// one command's answers, or "" when there is none.
func answerError(answers []decide.Answer) (string, ErrorKind) {
	for i := range answers {
		switch err := answers[i].Err; {
		case err == nil:
		case errors.Is(err, decide.ErrWrongType):
			return errWrongType, ErrInvalidArg
		case errors.Is(err, decide.ErrNotApplied):
			return errNotApplied, ErrUnavailable
		case errors.Is(err, decide.ErrUnsupported):
			return errThrottleNotStore, ErrUnavailable
		default:
			return "ERR " + err.Error(), ErrUnavailable
		}
	}
	return "", 0
}
