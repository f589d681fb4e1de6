package shard

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"testing"
)

// TestTableAgainstAMap drives random inserts, updates and removals through
// the table and a plain Go map side by side; both must always agree. A
// weak hash (only 4 distinct values of the upper bits) forces long probe
// runs and fingerprint collisions, which full key comparison must resolve.
func TestTableAgainstAMap(t *testing.T) {
	for _, weak := range []bool{false, true} {
		t.Run(fmt.Sprint("weak hash ", weak), func(t *testing.T) {
			seed := maphash.MakeSeed()
			hash := func(k string) uint64 {
				h := maphash.String(seed, k)
				if weak {
					h = h&0xffffffff | (h>>62)<<32
				}
				return h
			}
			tb := newTable()
			want := map[string]float64{}
			rng := rand.New(rand.NewPCG(1, 2))
			for step := range 60_000 {
				k := fmt.Sprint("key-", rng.IntN(5000))
				i, ok := tb.find(hash(k), []byte(k))
				if _, wok := want[k]; ok != wok {
					t.Fatalf("step %d: find(%q) = %v, map says %v", step, k, ok, wok)
				}
				switch {
				case ok && rng.IntN(3) == 0:
					tb.remove(i)
					delete(want, k)
				case ok:
					tb.entries[i].tokens = float64(step)
					want[k] = float64(step)
				default:
					tb.insert(hash(k), []byte(k), entry{tokens: float64(step)})
					want[k] = float64(step)
				}
				if step%10_000 == 0 || step == 59_999 {
					if tb.len() != len(want) {
						t.Fatalf("step %d: %d entries, map has %d", step, tb.len(), len(want))
					}
					for wk, wv := range want {
						i, ok := tb.find(hash(wk), []byte(wk))
						if !ok || tb.entries[i].tokens != wv || string(tb.key(&tb.entries[i])) != wk {
							t.Fatalf("step %d: %q lost or wrong", step, wk)
						}
					}
				}
			}
			// Remove everything: the table and arena shrink back.
			for k := range want {
				i, _ := tb.find(hash(k), []byte(k))
				tb.remove(i)
			}
			if tb.len() != 0 || len(tb.slots) != minSlots {
				t.Fatalf("after removing all: %d entries, %d slots", tb.len(), len(tb.slots))
			}
			tb.free()
		})
	}
}

// TestTableGivesMemoryBack fills a table with 300,000 buckets, deletes them
// all and frees it: the memory the table holds must grow with the buckets,
// come back down as they go (slot table, entries and arena all shrink) and
// drop to zero once the table is freed.
func TestTableGivesMemoryBack(t *testing.T) {
	seed := maphash.MakeSeed()
	tb := newTable()
	before := tb.held.Load()
	const n = 300_000
	key := func(i int) []byte { return fmt.Appendf(nil, "bucket:%010d", i) }
	for i := range n {
		k := key(i)
		if tb.insert(maphash.Bytes(seed, k), k, entry{tokens: float64(i)}) < 0 {
			t.Fatalf("insert %d refused", i)
		}
	}
	full := tb.held.Load()
	// 48 B entry + 17 B key + 8–16 B slot per bucket, page-rounded.
	if perBucket := float64(full) / n; perBucket < 65 || perBucket > 140 {
		t.Fatalf("%.1f bytes per bucket held at %d buckets, want 65..140", perBucket, n)
	}
	for i := range n {
		k := key(i)
		j, ok := tb.find(maphash.Bytes(seed, k), k)
		if !ok || tb.entries[j].tokens != float64(i) {
			t.Fatalf("bucket %d lost or wrong after growth", i)
		}
		tb.remove(j)
	}
	if left := tb.held.Load(); left > full/8 {
		t.Fatalf("after deleting every bucket the table still holds %d of %d bytes", left, full)
	}
	tb.free()
	if before <= 0 || tb.held.Load() != 0 {
		t.Fatalf("held %d bytes when new, %d after free; want > 0 and 0", before, tb.held.Load())
	}
}

// BenchmarkTableMemoryPerBucket reports the bytes the table holds per
// bucket at 1M buckets with 16-byte keys (slots, entries, arena).
func BenchmarkTableMemoryPerBucket(b *testing.B) {
	seed := maphash.MakeSeed()
	for b.Loop() {
		tb := newTable()
		for i := range 1_000_000 {
			k := []byte(fmt.Sprintf("key:%012d", i))
			tb.insert(maphash.Bytes(seed, k), k, entry{})
		}
		bytes := 8*len(tb.slots) + 48*len(tb.entries) + len(tb.arena)
		b.ReportMetric(float64(bytes)/1e6, "bytes/bucket")
		tb.free()
	}
}
