package main

import (
	"bufio"
	"bytes"
	"io"
	"math"
	"net"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestHistogramSlots(t *testing.T) {
	prev := -1
	for _, v := range []uint64{0, 1, 255, 256, 257, 511, 512, 1000, 1e6, 1e9, 1 << 40, 1<<41 - 1, 1 << 41, math.MaxUint64} {
		i := bucketIndex(v)
		if i < prev || i >= histCounts {
			t.Fatalf("bucketIndex(%d) = %d, previous %d, slots %d", v, i, prev, histCounts)
		}
		prev = i
		if v < 1<<41 && (bucketLow(i) > v || bucketHigh(i) < v) {
			t.Fatalf("%d in slot %d [%d, %d]", v, i, bucketLow(i), bucketHigh(i))
		}
	}
	for i := 0; i+1 < histCounts; i++ {
		if bucketLow(i+1) != bucketHigh(i)+1 {
			t.Fatalf("slot %d ends at %d, slot %d starts at %d", i, bucketHigh(i), i+1, bucketLow(i+1))
		}
		if bucketIndex(bucketLow(i)) != i || bucketIndex(bucketHigh(i)) != i {
			t.Fatalf("slot %d does not round-trip", i)
		}
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h histogram
	var vals []uint64
	x := uint64(12345)
	for i := 0; i < 100000; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		v := 1000 + x%5_000_000 // 1 µs .. 5 ms
		vals = append(vals, v)
		h.recordN(v, 1)
	}
	sort.Slice(vals, func(i, j int) bool { return vals[i] < vals[j] })
	for _, q := range []float64{0.5, 0.99, 0.999} {
		exact := vals[int(math.Ceil(q*float64(len(vals))))-1]
		got := h.quantile(q)
		if got < exact || float64(got-exact) > float64(exact)/128+1 {
			t.Errorf("q%.3f = %d, exact %d", q, got, exact)
		}
	}
	var empty histogram
	if empty.quantile(0.99) != 0 {
		t.Error("empty histogram has a quantile")
	}
}

func TestReadReply(t *testing.T) {
	in := ":1\r\n:0\r\n-ERR wrong\r\n:5\r\n$3\r\nabc\r\n*2\r\n:1\r\n$-1\r\n+OK\r\n:1\r\n"
	r := bufio.NewReader(strings.NewReader(in))
	want := []reply{replyAllowed, replyDenied, replyOther, replyOther, replyOther, replyOther, replyOther, replyAllowed}
	for i, w := range want {
		got, _, err := readReply(r)
		if err != nil || got != w {
			t.Fatalf("reply %d: %v, %v; want %v", i, got, err, w)
		}
	}
	if _, _, err := readReply(r); err != io.EOF {
		t.Fatalf("after the last reply: %v", err)
	}
	if _, _, err := readReply(bufio.NewReader(strings.NewReader("?x\r\n"))); err == nil {
		t.Fatal("unknown type byte accepted")
	}
}

func TestKeyFormat(t *testing.T) {
	kf := keyFormat{prefix: "k", width: 16}
	if err := kf.check(10_000_000); err != nil {
		t.Fatal(err)
	}
	b := []byte(kf.template())
	kf.put(b, 9_999_999)
	if string(b) != "k000000009999999" {
		t.Fatalf("key %q", b)
	}
	if err := (keyFormat{prefix: "key:", width: 6}).check(1000); err == nil {
		t.Fatal("1000 keys fit in 2 digits?")
	}
}

// fakeServer answers +PONG to the first command of each connection and then
// reply to every cmdLen bytes it reads.
func fakeServer(t *testing.T, cmdLen int, reply string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				ping := make([]byte, len("*1\r\n$4\r\nPING\r\n"))
				if _, err := io.ReadFull(c, ping); err != nil {
					return
				}
				c.Write([]byte("+PONG\r\n"))
				buf := make([]byte, 64*1024)
				var out []byte
				pending := 0
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					pending += n
					out = out[:0]
					for ; pending >= cmdLen; pending -= cmdLen {
						out = append(out, reply...)
					}
					if _, err := c.Write(out); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func TestHotLoopAllocatesNothing(t *testing.T) {
	kf := keyFormat{prefix: "k", width: 16}
	one, keyOff := appendCommand(nil, 1, "TB.ACQUIRE", kf.template(), "10", "1", "1")
	addr := fakeServer(t, len(one), ":1\r\n")
	ping, _ := appendCommand(nil, -1, "PING")
	var h histogram
	w := &worker{kf: kf, keys: 1000, cmdLen: len(one), lat: &h, sched: &h}
	if err := w.connect(addr, time.Second, ping, one, keyOff, 8); err != nil {
		t.Fatal(err)
	}
	defer w.conn.Close()
	allocs := testing.AllocsPerRun(200, func() {
		w.fill(8)
		if err := w.exchange(8); err != nil {
			t.Fatal(err)
		}
		h.recordN(1234, 8)
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per round", allocs)
	}
	if w.allowed != 8*201 || w.errors != 0 {
		t.Fatalf("allowed %d errors %d", w.allowed, w.errors)
	}
}

func testOptions(addr string) options {
	return options{
		addr: addr, conns: 4, duration: 2 * time.Second, keys: 100, keyPrefix: "k", keyLen: 16,
		capacity: "10", rate: "1", cost: "1", pipeline: 2, dialConc: 2, dialTimeout: time.Second,
		grace: time.Second, seed: 1, noInfo: true,
	}
}

func TestRunCountsRequestsAndErrors(t *testing.T) {
	kf := keyFormat{prefix: "k", width: 16}
	one, _ := appendCommand(nil, 1, "TB.ACQUIRE", kf.template(), "10", "1", "1")

	o := testOptions(fakeServer(t, len(one), ":0\r\n"))
	o.requests = 1000
	rep, err := run(o, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Established != 4 || rep.Requests != 1000 || rep.Denied != 1000 || rep.Errors != 0 || rep.ConnErrors != 0 {
		t.Fatalf("%+v", rep)
	}
	if rep.Latency.Count != 1000 || rep.Latency.P99 <= 0 || rep.Latency.Max < rep.Latency.P50 {
		t.Fatalf("latency %+v", rep.Latency)
	}

	o = testOptions(fakeServer(t, len(one), "-ERR nope\r\n"))
	o.requests = 10
	rep, err = run(o, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Errors != 10 || rep.FirstError != "-ERR nope" {
		t.Fatalf("errors %d first %q", rep.Errors, rep.FirstError)
	}
}

func TestRunPacedAndPrefill(t *testing.T) {
	kf := keyFormat{prefix: "k", width: 16}
	one, _ := appendCommand(nil, 1, "TB.ACQUIRE", kf.template(), "10", "1", "1")
	addr := fakeServer(t, len(one), ":1\r\n")

	o := testOptions(addr)
	o.qps = 200
	o.duration = time.Second
	o.timeline = true
	rep, err := run(o, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests < 150 || rep.Requests > 210 || rep.Scheduled == nil {
		t.Fatalf("paced at 200/s for 1 s: %d requests", rep.Requests)
	}
	if len(rep.Timeline) != 1 || rep.Timeline[0].Requests != uint64(rep.Requests) || rep.Timeline[0].GC != -1 {
		t.Fatalf("timeline %+v", rep.Timeline)
	}

	o = testOptions(addr)
	o.prefill = 1001
	o.pipeline = 16
	rep, err = run(o, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests != 1001 || !rep.Prefill.Complete {
		t.Fatalf("prefill: %d requests, %+v", rep.Requests, rep.Prefill)
	}
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"--prefill", "10000000"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.conns != 8 || o.pipeline != 256 || o.duration != 5*time.Minute {
		t.Fatalf("prefill defaults: %+v", o)
	}
	var out bytes.Buffer
	for _, bad := range [][]string{
		{"--conns", "0"},
		{"--rate", "fast"},
		{"--prefill", "10", "--keys", "5"},
		{"--keys", "100000000000", "--key-len", "8"},
		{"--duration", "0s"},
	} {
		if _, err := parseFlags(bad, &out); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
