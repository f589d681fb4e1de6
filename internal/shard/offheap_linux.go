//go:build linux

package shard

import (
	"os"
	"syscall"
	"unsafe"
)

// The table's three arrays live in anonymous private mappings outside the
// Go heap. They hold no pointers, so the collector never needed to scan
// them; keeping them off the heap also keeps them out of the GC's pacing
// (GOGC would otherwise let the heap grow to twice the live buckets before
// collecting) and lets growth use mremap, which moves pages instead of
// copying them and leaves no old array behind for a later GC to free.
// Only the shard's own goroutine touches its table, so a mapping that moves
// or is unmapped is never read through a stale slice.

// pageSize is the kernel's page size (4 KiB on x86-64, 16 or 64 KiB on some
// arm64 kernels): mappings are whole pages, and held counts them so.
var pageSize = uintptr(os.Getpagesize())

func pages(bytes uintptr) uintptr { return (bytes + pageSize - 1) &^ (pageSize - 1) }

func mappedBytes[T any](s []T) uintptr {
	var zero T
	return pages(uintptr(cap(s)) * unsafe.Sizeof(zero))
}

// offSize is the memory s holds: its mapping, whole pages.
func offSize[T any](s []T) int64 { return int64(mappedBytes(s)) }

// sliceAt views n bytes at addr as a []T of length n and the capacity that
// fits. The double indirection turns the address (an integer from the
// kernel, not from the Go heap) into a pointer without tripping vet.
func sliceAt[T any](addr, bytes uintptr, n int) []T {
	var zero T
	p := *(*unsafe.Pointer)(unsafe.Pointer(&addr))
	return unsafe.Slice((*T)(p), bytes/unsafe.Sizeof(zero))[:n]
}

// offAlloc returns a zeroed slice of length n (and at least capacity n)
// outside the Go heap, or ok false when the kernel refuses the memory.
func offAlloc[T any](n int) (s []T, ok bool) {
	var zero T
	bytes := pages(max(1, uintptr(n)*unsafe.Sizeof(zero)))
	addr, _, errno := syscall.Syscall6(syscall.SYS_MMAP, 0, bytes,
		syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS, ^uintptr(0), 0)
	if errno != 0 {
		return nil, false
	}
	return sliceAt[T](addr, bytes, n), true
}

// offResize returns s with capacity for at least n elements (n ≥ len(s)),
// its contents kept and the new room zeroed. Shrinking gives the tail's
// pages back at once. On failure s is returned unchanged with ok false.
func offResize[T any](s []T, n int) ([]T, bool) {
	if cap(s) == 0 {
		t, ok := offAlloc[T](n)
		return t[:0], ok
	}
	var zero T
	old, bytes := mappedBytes(s), pages(max(1, uintptr(n)*unsafe.Sizeof(zero)))
	if bytes == old {
		return s, true
	}
	const mremapMayMove = 1
	addr, _, errno := syscall.Syscall6(syscall.SYS_MREMAP, uintptr(unsafe.Pointer(unsafe.SliceData(s))), old, bytes, mremapMayMove, 0, 0)
	if errno != 0 {
		return s, false
	}
	return sliceAt[T](addr, bytes, len(s)), true
}

// offFree unmaps s. s must not be used afterwards.
func offFree[T any](s []T) {
	if cap(s) == 0 {
		return
	}
	bytes := mappedBytes(s)
	syscall.Syscall(syscall.SYS_MUNMAP, uintptr(unsafe.Pointer(unsafe.SliceData(s))), bytes, 0)
}
