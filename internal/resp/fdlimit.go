package resp

import (
	"fmt"
	"log/slog"
	"math"
)

// ReservedFDs is how many file descriptors bucketd keeps for itself beyond
// one per client: 32 for the standard streams, the two listeners, the Go
// runtime's poller, the metrics server's connections and snapshot files
// (Redis keeps 32 too), plus the refusals being written at once
// (maxRefusing). Connections to Redis come on top: see FitMaxClients.
const ReservedFDs = 32 + maxRefusing

// ClientLimit is what FitMaxClients decided.
type ClientLimit struct {
	// MaxClients is the number of clients to serve: the one asked for,
	// or fewer when the open-file limit leaves no room for them. 0 (no
	// limit) only when the open-file limit is unknown.
	MaxClients int
	Asked      int    // --max-clients; 0 asks for as many as the limit allows
	Reserved   int    // descriptors kept for bucketd itself
	FileLimit  uint64 // the open-file limit in force; 0 when unknown
	RaisedFrom uint64 // the limit before FitMaxClients raised it; 0 if it did not
}

// FitMaxClients fits --max-clients (asked) into the process's open-file
// limit, keeping ReservedFDs plus redisConns descriptors for bucketd
// itself. Beyond the limit, accept fails with "too many open files": a
// client then waits in the listen backlog, unanswered, where one refused
// by --max-clients gets "-ERR max number of clients reached" at once. So
// it first raises the soft limit toward the hard one (as Redis does; the
// Go runtime has usually done so already), then, if that is not enough,
// serves fewer clients. It fails when not even one client fits. Call it
// once at start; Log says what it did.
func FitMaxClients(asked, redisConns int) (ClientLimit, error) {
	l := ClientLimit{MaxClients: asked, Asked: asked, Reserved: ReservedFDs + redisConns}
	want := uint64(math.MaxUint64) // as many as allowed
	if asked > 0 {
		want = uint64(asked) + uint64(l.Reserved)
	}
	soft, from, ok := raiseFileLimit(want)
	if !ok {
		return l, nil // unknown on this system: serve as asked
	}
	l.FileLimit, l.RaisedFrom = soft, from
	n, ok := fitClients(asked, l.Reserved, soft)
	if !ok {
		return l, fmt.Errorf("the open-file limit %d is too low: bucketd keeps %d descriptors for itself and needs one per client; "+
			"raise it to at least %d plus --max-clients (ulimit -n, or LimitNOFILE= in a systemd unit)", soft, l.Reserved, l.Reserved)
	}
	l.MaxClients = n
	return l, nil
}

// fitClients returns how many clients fit into the open-file limit soft
// beside reserved descriptors, at most asked (0: as many as fit), and
// false when not even one does.
func fitClients(asked, reserved int, soft uint64) (int, bool) {
	room := int64(min(soft, math.MaxInt32)) - int64(reserved)
	switch {
	case room < 1:
		return 0, false
	case asked == 0 || int64(asked) > room:
		return int(room), true
	}
	return asked, true
}

// Log writes what FitMaxClients decided when there is something to say:
// a raised limit, fewer clients served than asked, or the number a
// --max-clients of 0 came to.
func (l ClientLimit) Log(logger *slog.Logger) {
	if l.RaisedFrom != 0 {
		logger.Info("raised the open-file limit", "from", l.RaisedFrom, "to", l.FileLimit)
	}
	if l.FileLimit == 0 {
		return
	}
	attrs := []any{"max_clients", l.Asked, "effective_max_clients", l.MaxClients,
		"open_file_limit", l.FileLimit, "reserved_fds", l.Reserved}
	switch {
	case l.Asked == 0:
		logger.Info("--max-clients 0: serving as many clients as the open-file limit allows", attrs...)
	case l.MaxClients < l.Asked:
		logger.Warn("open-file limit too low for --max-clients; serving fewer clients: raise the limit "+
			"(ulimit -n, or LimitNOFILE= in a systemd unit) to max_clients + reserved_fds, or lower --max-clients",
			attrs...)
	}
}
