//go:build !linux && !darwin

package resp

// raiseFileLimit reports the open-file limit as unknown: it is read on
// Linux and macOS only (elsewhere syscall.Rlimit's fields differ).
func raiseFileLimit(uint64) (soft, raisedFrom uint64, ok bool) { return 0, 0, false }
