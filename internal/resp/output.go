package resp

import (
	"errors"
	"math"
	"net"
	"strconv"
	"time"
)

// Output limits: what a connection's replies may make the server hold,
// Redis's client-output-buffer-limit. The replies of a batch are built in
// the connection's Writer and written at once when the batch is done (see
// Server.serve), so what is pending is the Writer's bytes:
//   - past the hard limit, while they are built (the Session stops at the
//     command that passes it, wire.Writer.Over; the Server checks once
//     more after the batch), the connection is closed and none of them is
//     written;
//   - above the soft limit when they are written, the bytes beyond it must
//     reach the socket within the soft limit's time, or the connection is
//     closed: a client that does not read holds the soft limit at most,
//     and no longer than that.
// Either way the connection is counted (Stats.OutputLimitDisconnections)
// and logged, at most a line a second. A connection's class says which
// limits hold; it changes with what the connection asks for
// (SetOutputClass).

// OutputClass is a kind of client, for its output limits: Redis's classes
// but for replicas, which bucketd has none of.
type OutputClass uint8

const (
	// NormalClient is every client but those below.
	NormalClient OutputClass = iota
	// PubSubClient is a client that gets pushed messages: bucketd's are
	// CLIENT TRACKING's invalidations.
	PubSubClient
	// NumOutputClasses is the number of classes.
	NumOutputClasses
)

// OutputClassNames names the classes as Redis does, indexed by class; they
// are metric label values too.
var OutputClassNames = [NumOutputClasses]string{"normal", "pubsub"}

// OutputLimit bounds the pending replies of one class of clients, in
// bytes; 0 means no such limit, as in Redis.
type OutputLimit struct {
	HardBytes int
	SoftBytes int
	// SoftTime is how long the pending replies may stay above SoftBytes.
	SoftTime time.Duration
}

// OutputLimits are the limits of each class, indexed by class.
type OutputLimits [NumOutputClasses]OutputLimit

// String writes the limits as Redis's CONFIG GET client-output-buffer-limit
// does: class hard soft soft-seconds, for each class, in bytes and whole
// seconds.
func (ls OutputLimits) String() string {
	var b []byte
	for cl, l := range ls {
		if cl > 0 {
			b = append(b, ' ')
		}
		b = append(b, OutputClassNames[cl]...)
		for _, n := range []int64{int64(l.HardBytes), int64(l.SoftBytes), int64(l.SoftTime / time.Second)} {
			b = strconv.AppendInt(append(b, ' '), n, 10)
		}
	}
	return string(b)
}

// DefaultOutputLimits are Config.OutputLimits' default: Redis's for
// pub/sub clients (32 MiB, or 8 MiB for 60 s), for both classes. Redis
// leaves normal clients unbounded; bucketd's replies are a few bytes each,
// and 32 MiB is far more than a pipeline of them, while one write of 60
// CLIENT GETNAME after an 8 MiB name asked for 480 MiB (issue 19). What a
// connection past the limit costs is about three times the limit (the
// Writer's growth, and the garbage the collector lets pile up).
var DefaultOutputLimits = OutputLimits{
	NormalClient: {HardBytes: 32 << 20, SoftBytes: 8 << 20, SoftTime: 60 * time.Second},
	PubSubClient: {HardBytes: 32 << 20, SoftBytes: 8 << 20, SoftTime: 60 * time.Second},
}

// Which limit a connection passed, as the log line says it.
const (
	limitHard = "hard"
	limitSoft = "soft"
)

// outputLimitLog is the message of the line a connection closed over its
// output limit is logged with.
const outputLimitLog = "closed a client connection over its output buffer limit (client-output-buffer-limit)"

// SetOutputClass makes the limits of cl hold for the connection's replies
// from now on: CLIENT TRACKING turns a client into a PubSubClient, and
// back.
func (c *Conn) SetOutputClass(cl OutputClass) {
	c.class = cl
	l := c.s.cfg.OutputLimits[cl]
	c.w.SetLimit(l.HardBytes)
	c.softBytes, c.softTime = math.MaxInt, l.SoftTime
	if l.SoftBytes > 0 {
		c.softBytes = l.SoftBytes
	}
}

// flush writes the batch's replies: at once (one system call) while they
// are within the soft limit, which is the hot path's one comparison.
func (c *Conn) flush() error {
	if c.w.Len() <= c.softBytes {
		return c.w.Flush(c.sock)
	}
	return c.w.Flush(softWriter{c})
}

// softWriter writes replies above the soft limit: the bytes beyond it
// within the soft limit's time, the rest as usual.
type softWriter struct{ c *Conn }

func (sw softWriter) Write(p []byte) (int, error) {
	c := sw.c
	over := len(p) - c.softBytes
	c.sock.SetWriteDeadline(time.Now().Add(c.softTime)) //nolint:errcheck // fails only on a closed conn, which the write reports
	n, err := c.sock.Write(p[:over])
	if err == nil {
		c.sock.SetWriteDeadline(time.Time{}) //nolint:errcheck // as above
		var m int
		m, err = c.sock.Write(p[over:])
		n += m
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() && !c.draining.Load() {
		c.s.overOutputLimit(c, limitSoft, len(p)-n)
	}
	return n, err
}

// overOutputLimit counts and logs a connection closed over its output
// limit (limitHard or limitSoft) with pending bytes of replies unsent.
func (s *Server) overOutputLimit(c *Conn, which string, pending int) {
	s.n.outputLimit[c.class].Add(1)
	l := s.cfg.OutputLimits[c.class]
	bound := l.HardBytes
	if which == limitSoft {
		bound = l.SoftBytes
	}
	s.outputLog.Log(func(suppressed int64) {
		s.cfg.Logger.Warn(outputLimitLog, "id", c.id, "addr", c.remote, "class", OutputClassNames[c.class],
			"limit", which, "limit_bytes", bound, "pending_bytes", pending, "suppressed", suppressed)
	})
}
