package gcfloor

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// rss returns this process's VmRSS in bytes.
func rss(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc: %v", err) // not Linux: RSS cannot be read, nothing to check
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// TestBallast: the ballast raises the heap target to the floor, far fewer
// collections run for the same garbage, and it adds nothing to RSS by
// itself. It calls Set's work directly, so it runs under -race too.
func TestBallast(t *testing.T) {
	const floor = 64 << 20
	churn := func() uint32 { // 128 MB of 1 KB garbage over a small live heap
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		start := ms.NumGC
		var sink []byte
		for range 128 << 10 {
			sink = make([]byte, 1024)
		}
		_ = sink
		runtime.ReadMemStats(&ms)
		return ms.NumGC - start
	}
	runtime.GC()
	without := churn()
	before := rss(t)
	ballast = make([]byte, floor/2) // what Set does, minus its environment checks
	defer func() { ballast = nil }()
	runtime.GC()
	added := rss(t) - before
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	with := churn()
	keepAlive()
	t.Logf("collections for 128 MB of garbage: %d without the ballast, %d with; next target %.1f MB; RSS +%.1f MB for a %d MB ballast",
		without, with, float64(ms.NextGC)/(1<<20), float64(added)/(1<<20), floor>>21)
	if ms.NextGC < floor {
		t.Fatalf("heap target %d with the ballast, want at least the %d floor", ms.NextGC, floor)
	}
	if with*3 > without {
		t.Fatalf("%d collections with the ballast against %d without: want at most a third", with, without)
	}
	switch {
	case raceBuild:
		// The race runtime touches what it allocates; Set installs no
		// ballast in race builds, and scripts/test.sh runs this test
		// without -race as well, where the RSS check below applies.
		t.Logf("race build: RSS not checked (+%d bytes)", added)
	case added > 8<<20:
		t.Fatalf("the untouched ballast added %d bytes of RSS", added)
	}
	if Bytes() != floor/2 {
		t.Fatalf("Bytes() = %d, want %d", Bytes(), floor/2)
	}
}

// TestSetLeavesAnExplicitGOGCAlone: with GOGC in the environment Set
// installs nothing.
func TestSetLeavesAnExplicitGOGCAlone(t *testing.T) {
	t.Setenv("GOGC", "100")
	Set(64 << 20)
	if Bytes() != 0 {
		t.Fatalf("Set installed a %d-byte ballast with GOGC=100 set", Bytes())
	}
}
