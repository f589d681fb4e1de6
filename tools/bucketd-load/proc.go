package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// raiseNoFile lifts the soft RLIMIT_NOFILE to the hard limit and returns
// both. need is the descriptors this run will hold; if the hard limit is
// below it, the error says so and how to fix it.
func raiseNoFile(need uint64) (soft, hard uint64, err error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, 0, fmt.Errorf("getrlimit: %w", err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return 0, 0, fmt.Errorf("setrlimit NOFILE to the hard limit %d: %w", lim.Max, err)
		}
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return 0, 0, fmt.Errorf("getrlimit: %w", err)
		}
	}
	if lim.Cur < need {
		return lim.Cur, lim.Max, fmt.Errorf(
			"the open-file hard limit is %d but this run needs about %d descriptors "+
				"(connections + %d spare); raise it first, e.g. `ulimit -n %d` as root "+
				"in the shell that starts bucketd-load, or `prlimit --nofile=%d:%d --pid $$`",
			lim.Max, need, fdSpare, need*2, need*2, need*2)
	}
	return lim.Cur, lim.Max, nil
}

// fdSpare is the descriptors kept free beyond one per connection: stdio,
// the control connection, /proc reads, the epoll descriptor.
const fdSpare = 32

// procMem is one reading of /proc/PID/status, in bytes.
type procMem struct {
	RSS int64 `json:"vm_rss_bytes"`
	HWM int64 `json:"vm_hwm_bytes"` // peak RSS since the process started
}

func readProcMem(pid int) (procMem, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return procMem{}, err
	}
	defer f.Close()
	var m procMem
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		var dst *int64
		switch {
		case strings.HasPrefix(line, "VmRSS:"):
			dst = &m.RSS
		case strings.HasPrefix(line, "VmHWM:"):
			dst = &m.HWM
		default:
			continue
		}
		fields := strings.Fields(line)
		if len(fields) >= 2 {
			kb, _ := strconv.ParseInt(fields[1], 10, 64)
			*dst = kb * 1024
		}
	}
	if m.RSS == 0 {
		return m, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	return m, sc.Err()
}

// rssSampler reads the server's VmRSS every interval and keeps the peak.
type rssSampler struct {
	pid  int
	stop chan struct{}
	done sync.WaitGroup

	mu      sync.Mutex
	peak    int64
	samples int
	err     error
}

func startRSSSampler(pid int, every time.Duration) *rssSampler {
	s := &rssSampler{pid: pid, stop: make(chan struct{})}
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			s.sample()
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *rssSampler) sample() {
	m, err := readProcMem(s.pid)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if s.err == nil {
			s.err = err
		}
		return
	}
	s.samples++
	s.peak = max(s.peak, m.RSS)
}

// finish stops sampling and returns the peak VmRSS seen.
func (s *rssSampler) finish() (peak int64, samples int, err error) {
	close(s.stop)
	s.done.Wait()
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak, s.samples, s.err
}

// serverInfo is what the report keeps of INFO.
type serverInfo struct {
	UsedMemory    int64  `json:"used_memory"`
	UsedMemoryRSS int64  `json:"used_memory_rss,omitempty"` // Redis only
	Keys          int64  `json:"keys"`                      // bucketd: buckets; Redis: db0 keys
	Clients       int64  `json:"connected_clients"`
	GOMAXPROCS    int64  `json:"gomaxprocs,omitempty"` // bucketd only
	RedisVersion  string `json:"redis_version,omitempty"`
	BucketdVer    string `json:"bucketd_version,omitempty"`
	ExpiredKeys   int64  `json:"expired_keys"`
}

func parseInfo(text string) serverInfo {
	var si serverInfo
	num := func(v string) int64 { n, _ := strconv.ParseInt(v, 10, 64); return n }
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimRight(line, "\r")
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "used_memory":
			si.UsedMemory = num(v)
		case "used_memory_rss":
			si.UsedMemoryRSS = num(v)
		case "connected_clients":
			si.Clients = num(v)
		case "gomaxprocs":
			si.GOMAXPROCS = num(v)
		case "redis_version":
			si.RedisVersion = v
		case "bucketd_version":
			si.BucketdVer = v
		case "expired_keys":
			si.ExpiredKeys = num(v)
		case "buckets":
			si.Keys = num(v)
		case "db0":
			// keys=N,expires=M,avg_ttl=T
			for _, kv := range strings.Split(v, ",") {
				if n, ok := strings.CutPrefix(kv, "keys="); ok {
					si.Keys = num(n)
				}
			}
		}
	}
	return si
}

// control runs one command on a fresh connection and returns the bulk
// reply. It is used outside the measured window only.
func control(addr string, timeout time.Duration, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	cmd, _ := appendCommand(nil, -1, args...)
	if _, err := c.Write(cmd); err != nil {
		return "", err
	}
	return readBulk(bufio.NewReader(c))
}

func fetchInfo(addr string, timeout time.Duration) (serverInfo, error) {
	text, err := control(addr, timeout, "INFO")
	if err != nil {
		return serverInfo{}, err
	}
	return parseInfo(text), nil
}

// gcStats is the Go GC pause summary bucketd exports on /metrics.
type gcStats struct {
	Count       int64   `json:"gc_count"`
	PauseTotalS float64 `json:"gc_pause_total_seconds"`
}

func fetchGC(url string, timeout time.Duration) (gcStats, error) {
	cl := http.Client{Timeout: timeout}
	resp, err := cl.Get(url)
	if err != nil {
		return gcStats{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return gcStats{}, fmt.Errorf("%s: %s", url, resp.Status)
	}
	var g gcStats
	found := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		switch k {
		case "go_gc_duration_seconds_count":
			f, _ := strconv.ParseFloat(v, 64)
			g.Count = int64(f)
			found++
		case "go_gc_duration_seconds_sum":
			g.PauseTotalS, _ = strconv.ParseFloat(v, 64)
			found++
		}
	}
	if err := sc.Err(); err != nil {
		return g, err
	}
	if found < 2 {
		return g, fmt.Errorf("%s has no go_gc_duration_seconds", url)
	}
	return g, nil
}

// clockTick is USER_HZ, the unit of the CPU times in /proc: 100 on every
// Linux architecture Go supports.
const clockTick = 100

// procCPU is the user+system CPU seconds the process has used so far.
func procCPU(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count from after its ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad utime/stime", pid)
	}
	return float64(ut+st) / clockTick, nil
}

// selfCPU is this process's user+system CPU seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// machineCPU is the busy, niced and total CPU seconds of the whole machine,
// from the first line of /proc/stat. busy excludes idle and iowait; niced
// (time of processes with a positive nice value, such as fuzzers run at
// nice 19) is part of busy.
func machineCPU() (busy, niced, total float64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, 0, errors.New("/proc/stat: no cpu line")
	}
	var idle, nice int64
	for i, v := range f[1:] {
		if i >= 8 { // guest time is already counted in user and nice
			break
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		total += float64(n)
		switch i {
		case 1:
			nice = n
		case 3, 4: // idle, iowait
			idle += n
		}
	}
	busy = total - float64(idle)
	return busy / clockTick, float64(nice) / clockTick, total / clockTick, nil
}
