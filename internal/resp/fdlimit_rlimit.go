//go:build linux || darwin

package resp

import "syscall"

// raiseFileLimit raises the soft open-file limit to want, or as close to
// it as the hard limit allows, and returns the soft limit in force and
// the one before a raise (0 if none). ok is false when the limit cannot
// be read.
func raiseFileLimit(want uint64) (soft, raisedFrom uint64, ok bool) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, 0, false
	}
	if rl.Cur >= want || rl.Max <= rl.Cur {
		return rl.Cur, 0, true
	}
	raised := syscall.Rlimit{Cur: min(want, rl.Max), Max: rl.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
		return rl.Cur, 0, true // keep the limit we have
	}
	return raised.Cur, rl.Cur, true
}
