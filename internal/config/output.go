package config

import (
	"errors"
	"math"
	"strconv"
	"strings"
)

// OutputBufferLimit is one client class's client-output-buffer-limit, as
// Redis has it: pending replies beyond HardBytes close the connection at
// once; beyond SoftBytes for SoftSeconds, too. 0 means no such limit.
type OutputBufferLimit struct {
	HardBytes   int
	SoftBytes   int
	SoftSeconds int
}

// OutputBufferLimits are the limits of the two classes bucketd has:
// normal clients, and pub/sub-like ones (CLIENT TRACKING on, which get
// pushes).
type OutputBufferLimits struct {
	Normal, PubSub OutputBufferLimit
}

// minOutputLimit is the smallest limit other than 0: below it, clients
// whose replies are ordinary (a pipeline of bucket replies, INFO) would be
// closed.
const minOutputLimit = 64 << 10

// outputLimitHint says how to write client-output-buffer-limit.
const outputLimitHint = `use one or more groups of "class hard soft soft-seconds", such as "normal 32mb 8mb 60 pubsub 32mb 8mb 60": ` +
	`class normal or pubsub; sizes in bytes or with k, kb, m, mb, g or gb, 0 (no limit) or at least 64kb; soft-seconds a whole number`

// clientOutputBufferLimit is the setting: Redis's syntax, one or more
// classes at once, each group changing only its class.
var clientOutputBufferLimit = setting{
	name: "client-output-buffer-limit", arg: "limits",
	usage: "most bytes of replies a client may make bucketd hold before it reads them, per class, in Redis's syntax: " +
		"one or more groups of 'class hard soft soft-seconds', class normal or pubsub (clients with CLIENT TRACKING on); " +
		"beyond hard the connection is closed at once, beyond soft for soft-seconds too; 0 means no limit",
	set: func(c *Config, v string) error {
		f := strings.Fields(v)
		if len(f) == 0 || len(f)%4 != 0 {
			return errors.New(outputLimitHint)
		}
		next := c.OutputBufferLimits
		for ; len(f) > 0; f = f[4:] {
			var l *OutputBufferLimit
			switch strings.ToLower(f[0]) {
			case "normal":
				l = &next.Normal
			case "pubsub":
				l = &next.PubSub
			case "replica", "slave":
				return errors.New("bucketd has no replicas, so no replica class: " + outputLimitHint)
			default:
				return errors.New(outputLimitHint)
			}
			hard, ok1 := parseSize(f[1])
			soft, ok2 := parseSize(f[2])
			secs, err := strconv.Atoi(f[3])
			if !ok1 || !ok2 || err != nil || secs < 0 || secs > 1e6 {
				return errors.New(outputLimitHint)
			}
			*l = OutputBufferLimit{HardBytes: hard, SoftBytes: soft, SoftSeconds: secs}
		}
		c.OutputBufferLimits = next
		return nil
	},
	get: func(c *Config) string {
		var b strings.Builder
		for i, cl := range []struct {
			name string
			l    OutputBufferLimit
		}{{"normal", c.OutputBufferLimits.Normal}, {"pubsub", c.OutputBufferLimits.PubSub}} {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(cl.name + " " + strconv.Itoa(cl.l.HardBytes) + " " + strconv.Itoa(cl.l.SoftBytes) + " " + strconv.Itoa(cl.l.SoftSeconds))
		}
		return b.String()
	},
}

// parseSize reads a size as Redis writes one (memtoull): digits, then
// optionally b, k (1000), kb (1024), m, mb, g or gb, in any case. It
// accepts 0 and sizes of at least minOutputLimit.
func parseSize(s string) (int, bool) {
	s = strings.ToLower(s)
	digits := strings.TrimRight(s, "bkmg")
	mult := map[string]int{"": 1, "b": 1, "k": 1000, "kb": 1 << 10, "m": 1e6, "mb": 1 << 20, "g": 1e9, "gb": 1 << 30}[s[len(digits):]]
	n, err := strconv.Atoi(digits)
	if mult == 0 || err != nil || n < 0 || digits[0] == '+' || n > math.MaxInt/mult { // err covers digits == ""
		return 0, false
	}
	n *= mult
	return n, n == 0 || n >= minOutputLimit
}
