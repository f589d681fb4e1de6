package gcfloor

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"

	"github.com/bucketd/bucketd/internal/testkit"
)

// rss returns this process's VmRSS in bytes, or -1 without /proc.
func rss() int64 {
	m, err := testkit.ReadMemory(os.Getpid())
	if err != nil {
		return -1
	}
	return m.RSS
}

// TestMain doubles as the child of TestBallastAddsNoRSS: with
// GCFLOOR_CHILD set, it installs a ballast first thing, as bucketd's main
// does, and prints the RSS it added.
func TestMain(m *testing.M) {
	if os.Getenv("GCFLOOR_CHILD") != "" {
		before := rss()
		ballast = make([]byte, 64<<20) // Set's work, minus its environment checks
		runtime.GC()
		fmt.Printf("added %d\n", rss()-before)
		runtime.KeepAlive(ballast)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestBallastAddsNoRSS: a ballast installed at start, as bucketd does it,
// is never touched and adds (almost) nothing to RSS. It runs in a fresh
// process, because memory the test process has used and freed would be
// zeroed, and so touched, when handed out again.
func TestBallastAddsNoRSS(t *testing.T) {
	if raceBuild {
		// The race runtime touches what it allocates; Set installs no
		// ballast in race builds, and scripts/test.sh runs this package
		// without -race as well, where this test applies.
		t.Log("race build: the ballast is off; RSS checked by the run without -race")
		return
	}
	if rss() < 0 {
		t.Log("no /proc/self/status: RSS cannot be read here")
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "GCFLOOR_CHILD=1", "GOGC=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var added int64
	if _, err := fmt.Sscanf(string(out), "added %d", &added); err != nil {
		t.Fatalf("child said %q", out)
	}
	t.Logf("a 64 MiB ballast added %.1f MiB of RSS", float64(added)/(1<<20))
	if added > 8<<20 {
		t.Fatalf("a 64 MiB ballast added %d bytes of RSS; it must stay untouched", added)
	}
}

// TestBallastRaisesTheTarget: with the ballast, the heap target is at least
// the floor and far fewer collections run for the same garbage.
func TestBallastRaisesTheTarget(t *testing.T) {
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
	ballast = make([]byte, floor/2) // what Set does, minus its environment checks
	defer func() { ballast = nil }()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	with := churn()
	runtime.KeepAlive(ballast)
	t.Logf("collections for 128 MB of garbage: %d without the ballast, %d with; next target %.1f MB",
		without, with, float64(ms.NextGC)/(1<<20))
	if ms.NextGC < floor {
		t.Fatalf("heap target %d with the ballast, want at least the %d floor", ms.NextGC, floor)
	}
	if with*3 > without {
		t.Fatalf("%d collections with the ballast against %d without: want at most a third", with, without)
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
