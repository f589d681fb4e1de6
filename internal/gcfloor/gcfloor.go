// Package gcfloor keeps the Go garbage collector's heap target from falling
// below a floor.
//
// bucketd keeps its buckets outside the Go heap (internal/shard), so the
// heap holds only connections, buffers and queues: often a few megabytes.
// With the default GOGC=100 the collector starts a cycle whenever the heap
// doubles, which under load (redcon allocates a few hundred bytes per
// command) means a hundred or more cycles a second, each with its
// stop-the-world phases and stack scans.
//
// The floor is a ballast: one pointer-free allocation of half the floor
// that is never touched. It counts in the heap the collector paces by, so
// the target is at least twice its size, but it costs no resident memory
// (the kernel maps pages on first touch, and nothing touches it) and no
// marking (it holds no pointers). What it costs is the garbage allowed to
// pile up between two collections, at most the floor. Unlike raising GOGC,
// it cannot stretch the target of a growing heap: the target stays
// 2 × (live + ballast).
//
// An explicit GOGC in the environment is left alone, and so are race-detector
// builds (the detector keeps shadow memory for every heap byte, so the
// allowed garbage would cost several times its size).
package gcfloor

import "os"

// ballast is referenced from a package variable, so it lives as long as
// the process.
var ballast []byte

// Set installs the ballast for a heap target of at least floor bytes, once.
// It does nothing when GOGC is set in the environment or the binary is built
// with the race detector.
func Set(floor int) {
	if os.Getenv("GOGC") != "" || raceBuild || ballast != nil || floor <= 0 {
		return
	}
	ballast = make([]byte, floor/2)
}

// Bytes returns the size of the ballast (0 when there is none), for heap
// figures that should show only real data.
func Bytes() int64 { return int64(len(ballast)) }
