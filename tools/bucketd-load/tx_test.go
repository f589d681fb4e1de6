package main

import (
	"bufio"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeTxServer answers PING, MULTI, EXEC and everything in between as a
// server with transactions does: +OK, +QUEUED and EXEC's array with reply
// for each queued command. With abort set, EXEC answers EXECABORT instead.
func fakeTxServer(t *testing.T, reply string, abort bool) string {
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
				serveTx(c, reply, abort)
			}()
		}
	}()
	return ln.Addr().String()
}

// serveTx answers the commands of one connection, flushing after each read.
func serveTx(c net.Conn, reply string, abort bool) {
	r, out := bufio.NewReader(c), bufio.NewWriter(c)
	queued := 0
	for {
		name, err := readCommandName(r)
		if err != nil {
			return
		}
		switch name {
		case "PING":
			out.WriteString("+PONG\r\n")
		case "MULTI":
			out.WriteString("+OK\r\n")
		case "EXEC":
			if abort {
				out.WriteString("-EXECABORT Transaction discarded because of previous errors.\r\n")
			} else {
				out.WriteString("*" + strconv.Itoa(queued) + "\r\n" + strings.Repeat(reply, queued))
			}
			queued = 0
		default:
			out.WriteString("+QUEUED\r\n")
			queued++
		}
		if r.Buffered() == 0 && out.Flush() != nil {
			return
		}
	}
}

// readCommandName reads one RESP command and returns its first argument.
func readCommandName(r *bufio.Reader) (string, error) {
	var name string
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
	for i := range n {
		if _, err := r.ReadString('\n'); err != nil { // $len
			return "", err
		}
		arg, err := r.ReadString('\n')
		if err != nil {
			return "", err
		}
		if i == 0 {
			name = strings.TrimSpace(arg)
		}
	}
	return name, nil
}

func TestTxModeCountsEachAcquire(t *testing.T) {
	o := testOptions(fakeTxServer(t, ":1\r\n", false))
	o.tx, o.pipeline, o.requests = 4, 4, 102 // the last round is a transaction of 2
	rep, err := run(o, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests != 102 || rep.Allowed != 102 || rep.Errors != 0 || rep.ConnErrors != 0 || rep.Tx != 4 {
		t.Fatalf("%+v", rep)
	}
	if !strings.HasPrefix(rep.Command, "MULTI, 4 × TB.ACQUIRE ") {
		t.Fatalf("command %q", rep.Command)
	}

	o = testOptions(fakeTxServer(t, ":1\r\n", true))
	o.tx, o.pipeline, o.requests = 4, 4, 8
	rep, err = run(o, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Errors != 8 || rep.FirstError != "-EXECABORT Transaction discarded because of previous errors." {
		t.Fatalf("errors %d, first %q", rep.Errors, rep.FirstError)
	}
}

func TestTxLoopAllocatesNothing(t *testing.T) {
	kf := keyFormat{prefix: "k", width: 16}
	one, keyOff := appendCommand(nil, 1, "TB.ACQUIRE", kf.template(), "10", "1", "1")
	// A fake that allocates nothing either: it answers each whole
	// transaction's bytes with the whole transaction's replies.
	txLen := len(multiCmd) + 16*len(one) + len(execCmd)
	addr := fakeServer(t, txLen, "+OK\r\n"+strings.Repeat("+QUEUED\r\n", 16)+"*16\r\n"+strings.Repeat(":0\r\n", 16))
	ping, _ := appendCommand(nil, -1, "PING")
	var h histogram
	w := &worker{kf: kf, keys: 1000, cmdLen: len(one), lat: &h, sched: &h, tx: true}
	if err := w.connect(addr, time.Second, ping, one, keyOff, 16); err != nil {
		t.Fatal(err)
	}
	defer w.conn.Close()
	allocs := testing.AllocsPerRun(100, func() {
		w.fill(16)
		if err := w.exchange(16); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per transaction", allocs)
	}
	if w.denied != 16*101 || w.errors != 0 {
		t.Fatalf("denied %d errors %d (%s)", w.denied, w.errors, w.firstErr)
	}
}

func TestParseTxFlags(t *testing.T) {
	o, err := parseFlags([]string{"--tx", "16"}, io.Discard)
	if err != nil || o.pipeline != 16 || o.tx != 16 {
		t.Fatalf("--tx 16: %+v, %v", o, err)
	}
	for _, bad := range [][]string{{"--tx", "16", "--pipeline", "8"}, {"--tx", "4", "--prefill", "10"}, {"--tx", "-1"}} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
