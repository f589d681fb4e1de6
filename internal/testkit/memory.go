package testkit

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Memory is a process's resident memory, from /proc/PID/status, in bytes.
type Memory struct {
	RSS int64 // VmRSS: resident now
	HWM int64 // VmHWM: the most resident since the process started
}

// ReadMemory reads the resident memory of process pid (os.Getpid() for the
// test itself). It fails where there is no /proc (not Linux) or when the
// process has exited.
func ReadMemory(pid int) (Memory, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return Memory{}, fmt.Errorf("testkit: reading resident memory: %w", err)
	}
	var m Memory
	for line := range strings.SplitSeq(string(b), "\n") {
		name, val, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("testkit: /proc/%d/status %s: %w", pid, name, err)
		}
		if name == "VmRSS" {
			m.RSS = kb << 10
		} else {
			m.HWM = kb << 10
		}
	}
	if m.RSS == 0 {
		return Memory{}, errors.New("testkit: /proc/" + strconv.Itoa(pid) + "/status has no VmRSS")
	}
	return m, nil
}
