//go:build !linux

package shard

import "unsafe"

// Outside Linux the table's arrays are ordinary heap slices: they hold no
// pointers, so the collector still skips their contents, but growth copies
// and GOGC headroom applies. See offheap_linux.go.

func offAlloc[T any](n int) ([]T, bool) { return make([]T, n), true }

func offResize[T any](s []T, n int) ([]T, bool) {
	t := make([]T, len(s), n)
	copy(t, s)
	return t, true
}

func offFree[T any](s []T) {}

func offSize[T any](s []T) int64 {
	var zero T
	return int64(cap(s)) * int64(unsafe.Sizeof(zero))
}
