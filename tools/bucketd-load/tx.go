package main

import (
	"bytes"
	"errors"
	"strconv"
)

// Transaction mode (--tx N): each round is one transaction, MULTI, N
// TB.ACQUIREs and EXEC, in one write, as a client library sends a
// transactional pipeline. The replies are +OK, N × +QUEUED and EXEC's array
// of N decisions; each decision counts as a request, so the figures compare
// with a plain pipeline of N (--pipeline N).

var (
	multiCmd, _ = appendCommand(nil, -1, "MULTI")
	execCmd, _  = appendCommand(nil, -1, "EXEC")
	okLine      = []byte("+OK\r\n")
	queuedLine  = []byte("+QUEUED\r\n")
)

// txDefaults makes --tx N set the pipeline to N, and refuses what does not
// go with it.
func (o *options) txDefaults(set map[string]bool) error {
	if o.tx == 0 {
		return nil
	}
	switch {
	case o.prefill > 0 || o.eval != "":
		return errors.New("--tx takes neither --prefill nor --eval")
	case set["pipeline"] && o.pipeline != o.tx:
		return errors.New("--tx N sends N commands per round: leave --pipeline out (or equal to N)")
	}
	o.pipeline = o.tx
	return nil
}

// wrapTx puts MULTI before the command copies in buf and EXEC after them.
func (w *worker) wrapTx() {
	w.scratch = make([]byte, 0, 20)
	buf := make([]byte, 0, len(multiCmd)+len(w.buf)+len(execCmd))
	buf = append(append(append(buf, multiCmd...), w.buf...), execCmd...)
	for i := range w.keyOff {
		w.keyOff[i] += len(multiCmd)
	}
	w.buf = buf
}

// exchangeTx sends one transaction of the first n commands and reads its
// replies. n is less than the pipeline only for the last round of a
// --requests budget, which is written in two parts.
func (w *worker) exchangeTx(n int) error {
	body := w.buf[:len(multiCmd)+n*w.cmdLen]
	if n == len(w.keyOff) {
		body = w.buf
	}
	if _, err := w.conn.Write(body); err != nil {
		return err
	}
	if n < len(w.keyOff) {
		if _, err := w.conn.Write(execCmd); err != nil {
			return err
		}
	}
	for i := 0; i <= n; i++ { // +OK, then +QUEUED for each command
		line, err := w.r.ReadSlice('\n')
		if err != nil {
			return err
		}
		want := queuedLine
		if i == 0 {
			want = okLine
		}
		if !bytes.Equal(line, want) {
			w.txError(line)
		}
	}
	return w.readExec(n)
}

// readExec reads EXEC's reply: an array of n decisions, or an error (a
// discarded transaction), which counts as n errors.
func (w *worker) readExec(n int) error {
	line, err := w.r.ReadSlice('\n')
	if err != nil {
		return err
	}
	if len(line) < 3 || line[0] != '*' {
		w.errors += int64(n) - 1
		w.txError(line)
		return nil
	}
	if !bytes.Equal(line[1:len(line)-2], strconv.AppendInt(w.scratch[:0], int64(n), 10)) {
		return errProtocol
	}
	for range n {
		rep, line, err := readReply(w.r)
		if err != nil {
			return err
		}
		switch rep {
		case replyAllowed:
			w.allowed++
		case replyDenied:
			w.denied++
		default:
			w.txError(line)
		}
	}
	return nil
}

// txError counts an unexpected reply line.
func (w *worker) txError(line []byte) {
	w.errors++
	if w.firstErr == "" {
		w.firstErr = string(bytes.TrimSpace(line))
	}
}
