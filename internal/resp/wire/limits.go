package wire

// Limits protect the server from what one client can make it hold.
type Limits struct {
	// MaxQueryBytes bounds the bytes of one not yet complete command a
	// connection may buffer (Redis's client-query-buffer-limit). A longer
	// command, or a bulk string announced longer than this, is a protocol
	// error and the connection is closed.
	MaxQueryBytes int
	// MaxArgs bounds the arguments of one command (Redis allows 1024*1024).
	MaxArgs int
	// MaxInlineBytes bounds one inline (telnet-style) command line; Redis
	// uses 64 KiB.
	MaxInlineBytes int
	// Unauthenticated holds a client that has not authenticated, while a
	// password is set, to Redis's bounds (since 6.2.6, CVE-2021-32675): a
	// command of more than UnauthenticatedMaxArgs arguments, or an
	// argument announced longer than UnauthenticatedMaxBulkBytes, is a
	// protocol error ("unauthenticated multibulk length",
	// "unauthenticated bulk length") and the connection is closed, so it
	// can make the server buffer little. Inline commands keep their own
	// bound, as in Redis.
	Unauthenticated bool
}

// The bounds of Limits.Unauthenticated, Redis's.
const (
	UnauthenticatedMaxArgs      = 10
	UnauthenticatedMaxBulkBytes = 16 << 10
)

// Defaults of Limits, Redis's own.
const (
	DefaultMaxQueryBytes  = 64 << 20
	DefaultMaxArgs        = 1024 * 1024
	DefaultMaxInlineBytes = 64 << 10
)

// WithDefaults returns l with every unset (zero or negative) field at its
// default.
func (l Limits) WithDefaults() Limits {
	if l.MaxQueryBytes <= 0 {
		l.MaxQueryBytes = DefaultMaxQueryBytes
	}
	if l.MaxArgs <= 0 {
		l.MaxArgs = DefaultMaxArgs
	}
	if l.MaxInlineBytes <= 0 {
		l.MaxInlineBytes = DefaultMaxInlineBytes
	}
	return l
}
