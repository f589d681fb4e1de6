package command

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestMatchesPrefixAsAScan: the binary search of matchesPrefix finds a
// key's prefix exactly when a scan of every prefix does, for random
// prefix sets (with and without "", which overlaps every other) and keys.
func TestMatchesPrefixAsAScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 4))
	word := func(n int) []byte {
		b := make([]byte, rng.IntN(n))
		for i := range b {
			b[i] = "abc"[rng.IntN(3)]
		}
		return b
	}
	for round := range 2000 {
		var tr tracking
		for range rng.IntN(8) {
			p := word(4)
			if len(p) == 0 && rng.IntN(4) > 0 {
				continue
			}
			tr.addPrefixes([][]byte{p}) //nolint:errcheck // an overlapping prefix is refused, and that is fine here
		}
		if rng.IntN(8) == 0 {
			tr.addPrefixes(nil) //nolint:errcheck // BCAST without PREFIX: "", every key, beside the others
		}
		for range 20 {
			key := word(6)
			scan := false
			for _, p := range tr.prefixes {
				scan = scan || strings.HasPrefix(string(key), p)
			}
			if got := tr.matchesPrefix(key); got != scan {
				t.Fatalf("round %d: prefixes %q, key %q: matchesPrefix %v, a scan %v", round, tr.prefixes, key, got, scan)
			}
		}
	}
}
