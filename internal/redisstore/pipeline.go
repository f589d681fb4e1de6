package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/decide"
)

// The script, its SHA-1 and the ops as variables, so that commands can
// carry pointers to them: go-redis writes *string arguments, and a pointer
// goes into an interface without an allocation, a string variable not.
var (
	scriptSHA = bucket.ScriptSHA1
	scriptSrc = bucket.Script
	opAcquire = bucket.OpAcquire
	opPeek    = bucket.OpPeek
)

// Arguments per operation in a script command: the key and its six ARGV
// (capacity rate cost op now tokens), plus EVALSHA sha numkeys once per
// command. Ten per operation is room for every command build makes, a
// one-operation command included.
const scriptArgs = 10

// batchKeys is how many operations one script call carries on a
// standalone Redis (the script's batch form: n keys, six ARGV each). Redis
// pays its per-call cost once for all of them, a third of its work per
// operation, which is what lets bucketd in front of Redis keep up with
// clients calling EVALSHA themselves. The operations of one call decide at
// one Redis TIME, as a shard's batch decides at one instant. On a cluster
// the keys of one call would have to share a hash slot, so each operation
// gets its own call there.
const batchKeys = 64

// numKeys holds "0" … "batchKeys" for the numkeys argument, as variables
// so commands can point at them without an allocation.
var numKeys = func() []string {
	n := make([]string, batchKeys+1)
	for i := range n {
		n[i] = strconv.Itoa(i)
	}
	return n
}()

// pipe is one pipeline: the operations of one or more Callers, answered
// together. It is made per pipeline and never reused, so a timer or a
// worker that finishes late can only touch its own pipe.
type pipe struct {
	deadline time.Time
	refs     []ref
	// answered[i] goes from 0 to 1 when refs[i] is answered: by the worker
	// with Redis's reply, or by the timer with the policy's answer,
	// whichever comes first.
	answered []atomic.Uint32
	cmds     []*redis.Cmd // one per command; a script command may answer several refs
	at       []answerAt   // per ref: where its answer is
	strs     []string     // prefixed keys and formatted numbers; commands point into it
	args     []any        // the arguments of cmds, one backing array
}

// answerAt locates a ref's answer: command cmd of the pipe, and in a batch
// command's array reply element elem (-1 for a command of one operation).
type answerAt struct{ cmd, elem int32 }

// ref is one operation in a pipe.
type ref struct {
	c    *Caller
	i    int32       // index in c.ops and c.results
	str  int32       // index of the prefixed key in pipe.strs; capacity, rate and cost follow it
	kind decide.Kind // copied: c.ops is the connection's once answered
}

// newPipe returns a pipe with the operations of c for Redis, with room for
// size operations.
func newPipe(c *Caller, size int) *pipe {
	p := &pipe{refs: make([]ref, 0, size)}
	p.add(c)
	return p
}

// add puts the operations of c for Redis into p.
func (p *pipe) add(c *Caller) {
	if len(p.refs) == 0 || c.deadline.Before(p.deadline) {
		p.deadline = c.deadline
	}
	for i := range c.ops {
		if k := c.ops[i].Kind; k != decide.Throttle {
			p.refs = append(p.refs, ref{c: c, i: int32(i), kind: k})
		}
	}
}

// noRetry marks a command as one go-redis must not send again after a
// transport error or a retryable error reply: Redis may have run it.
// Redirections (MOVED, ASK), after which Redis has not run it, still work.
type noRetry struct{ *redis.Cmd }

func (noRetry) NoRetry() bool { return true }

// worker sends pipelines to Redis, one at a time. Its scratch buffers are
// used only while it builds a pipe.
type worker struct {
	s     *Store
	in    chan *pipe
	arena []byte
	ends  []int
}

func (w *worker) run() {
	for p := range w.in {
		w.execute(p)
		w.s.idle <- w // room for every worker: never blocks
	}
}

// dispatch takes Callers off the queue, waits for a free worker (until the
// oldest Caller's deadline, after which that Caller is answered by the
// policy without being sent) and hands the worker everything that waits,
// up to MaxBatch operations, as one pipe. When the queue is closed and
// drained it stops the workers.
func (s *Store) dispatch() {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var next *Caller // taken off the queue, not in a pipe yet
	open := true
	for open || next != nil {
		if next == nil {
			c, ok := <-s.queue
			if !ok {
				break
			}
			next = c
		}
		w := s.freeWorker(next.deadline, timer)
		if w == nil {
			s.expireCaller(next)
			next = nil
			continue
		}
		p := newPipe(next, min(s.cfg.MaxBatch, max(next.remote(), len(s.queue)+1)))
		next = nil
		now := time.Now()
	gather:
		for len(p.refs) < s.cfg.MaxBatch {
			select {
			case c, ok := <-s.queue:
				switch {
				case !ok:
					open = false
					break gather
				case !c.deadline.After(now):
					s.expireCaller(c)
				case len(p.refs)+c.remote() > s.cfg.MaxBatch:
					next = c
					break gather
				default:
					p.add(c)
				}
			default:
				break gather
			}
		}
		w.in <- p // buffer 1, and the worker is idle: never blocks
	}
	for range s.cfg.Pipelines {
		w := <-s.idle
		close(w.in)
	}
}

// freeWorker returns an idle worker, waiting for one until deadline; nil
// when the deadline passes first.
func (s *Store) freeWorker(deadline time.Time, timer *time.Timer) *worker {
	wait := time.Until(deadline)
	if wait <= 0 {
		return nil
	}
	select {
	case w := <-s.idle:
		return w
	default:
	}
	timer.Reset(wait)
	select {
	case w := <-s.idle:
		timer.Stop()
		return w
	case <-timer.C:
		return nil
	}
}

// expireCaller answers every Redis operation of c with the policy: its
// deadline passed before a pipeline was free, so nothing was sent.
func (s *Store) expireCaller(c *Caller) {
	n := 0
	for i := range c.ops {
		k := c.ops[i].Kind
		if k == decide.Throttle {
			continue // answered by Run
		}
		s.count(k, s.failResult(k), true)
		c.answer(int32(i), s.failResult(k))
		n++
	}
	s.logError("no pipeline to Redis free within the timeout; answered without sending", context.DeadlineExceeded, n)
}

// expirePipe answers the operations of p that are still unanswered with the
// policy: the timer's path, when the Redis client has not returned by the
// deadline (plus grace).
func (s *Store) expirePipe(p *pipe) {
	n := 0
	for i := range p.refs {
		if s.settle(p, i, s.failResult(p.refs[i].kind), true) {
			n++
		}
	}
	if n > 0 {
		s.logError("no reply from Redis within the timeout", context.DeadlineExceeded, n)
	}
}

// failResult is the policy's answer to an operation Redis could not answer.
func (s *Store) failResult(k decide.Kind) decide.Answer {
	if k == decide.Reset {
		return decide.Answer{Err: decide.ErrNotApplied}
	}
	return s.fail
}

// settle answers operation i of p with r, unless it has been answered
// already; failed says r is the policy's. It reports whether it answered.
func (s *Store) settle(p *pipe, i int, r decide.Answer, failed bool) bool {
	if !p.answered[i].CompareAndSwap(0, 1) {
		return false
	}
	ref := &p.refs[i]
	s.count(ref.kind, r, failed)
	ref.c.answer(ref.i, r)
	return true
}

// count adds one answer to the counters.
func (s *Store) count(k decide.Kind, r decide.Answer, failed bool) {
	if failed {
		s.errs.Add(1)
		if k != decide.Reset {
			s.degraded.Add(1)
		}
	}
	if r.Err != nil {
		return
	}
	switch k {
	case decide.Acquire:
		if r.Decision.Allowed {
			s.allowed.Add(1)
		} else {
			s.denied.Add(1)
		}
	case decide.Peek:
		s.peeks.Add(1)
	case decide.Reset:
		if r.Removed {
			s.resets.Add(1)
		}
	}
}

// execute sends p to Redis and answers its operations.
func (w *worker) execute(p *pipe) {
	s := w.s
	ctx, cancel := context.WithDeadline(context.Background(), p.deadline)
	defer cancel()
	w.build(ctx, p)
	// The safety net: whatever the Redis client does, the operations are
	// answered shortly after the deadline.
	guard := time.AfterFunc(time.Until(p.deadline)+s.grace, func() { s.expirePipe(p) })
	defer guard.Stop()

	pl := s.client.Pipeline()
	cmders := make([]redis.Cmder, len(p.cmds))
	for i, cmd := range p.cmds {
		cmders[i] = noRetry{cmd}
	}
	_ = pl.BatchProcess(ctx, cmders...) // only queues; never fails
	// Exec's error is the first command's; each command carries its own.
	_, _ = pl.Exec(ctx)

	var retry []int
	var firstErr error
	failed := 0
	for i := range p.refs {
		at := p.at[i]
		cmd := p.cmds[at.cmd]
		if isNoScript(cmd.Err()) {
			retry = append(retry, i) // sent again on its own
			continue
		}
		r, err := s.outcome(p.refs[i].kind, cmd, int(at.elem))
		if s.settle(p, i, r, err != nil) && err != nil {
			failed++
			firstErr = err
		}
	}
	// NOSCRIPT: Redis did not run the script, so sending it again is safe.
	// The first round sends the script itself (EVAL) once per node and
	// EVALSHA behind it; the second sends EVAL for whatever still failed.
	for round := 0; len(retry) > 0 && round < 2; round++ {
		var f int
		var err error
		retry, f, err = w.reload(ctx, p, retry, round)
		failed += f
		if err != nil {
			firstErr = err
		}
	}
	for _, i := range retry {
		if s.settle(p, i, s.failResult(p.refs[i].kind), true) {
			failed++
			firstErr = redis.ErrNoScript
		}
	}
	if failed > 0 {
		s.logError("Redis call failed", firstErr, failed)
	}
}

// reload sends the operations idx of p again after NOSCRIPT, with EVAL
// where the script must be loaded, and answers them. It returns those that
// got NOSCRIPT again, the number of failures and the last failure.
func (w *worker) reload(ctx context.Context, p *pipe, idx []int, round int) (again []int, failed int, lastErr error) {
	s := w.s
	pl := s.client.Pipeline()
	cmds := make([]*redis.Cmd, len(idx))
	evalSent := false                // standalone
	var nodes map[*redis.Client]bool // cluster: masters with an EVAL in this round
	for j, i := range idx {
		eval := round > 0
		switch {
		case eval:
		case s.cluster == nil:
			eval = !evalSent
			evalSent = true
		default:
			node, err := s.cluster.MasterForKey(ctx, p.strs[p.refs[i].str])
			if err != nil || !nodes[node] {
				eval = true
				if nodes == nil {
					nodes = make(map[*redis.Client]bool)
				}
				nodes[node] = true
			}
		}
		if eval {
			s.scriptLoads.Add(1)
		}
		cmds[j] = p.scriptCmd(ctx, i, eval)
		_ = pl.Process(ctx, noRetry{cmds[j]}) // only queues; never fails
	}
	_, _ = pl.Exec(ctx)
	for j, i := range idx {
		if isNoScript(cmds[j].Err()) {
			again = append(again, i)
			continue
		}
		r, err := s.outcome(p.refs[i].kind, cmds[j], -1)
		if s.settle(p, i, r, err != nil) && err != nil {
			failed++
			lastErr = err
		}
	}
	return again, failed, lastErr
}

// outcome turns a command's reply (element elem of it for a batch, -1 for
// the whole reply) into the operation's result, or the policy's result and
// the error.
func (s *Store) outcome(k decide.Kind, cmd *redis.Cmd, elem int) (decide.Answer, error) {
	v, err := cmd.Val(), cmd.Err()
	if err == nil && elem >= 0 {
		if a, ok := v.([]any); ok && elem < len(a) {
			v = a[elem]
			err, _ = v.(error) // the script's error for this operation only
		} else {
			err = fmt.Errorf("%w: want an array with element %d, got %T", bucket.ErrBadReply, elem+1, v)
		}
	}
	if err != nil {
		if k != decide.Reset && redis.HasErrorPrefix(err, "WRONGTYPE") {
			// The key holds something else than a bucket: the client's
			// answer, not a Redis failure.
			return decide.Answer{Err: decide.ErrWrongType}, nil
		}
		return s.failResult(k), err
	}
	if k == decide.Reset {
		n, err := cmd.Int64()
		if err != nil {
			return s.failResult(k), err
		}
		return decide.Answer{Removed: n > 0}, nil
	}
	d, err := bucket.ParseReply(v)
	if err != nil {
		return s.failResult(k), err
	}
	return decide.Answer{Decision: d}, nil
}

func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// build makes p's commands. The prefixed keys and the numbers are written
// into the worker's arena and copied into one string per pipe, which the
// commands point into: after build, p no longer refers to any connection's
// buffers, so a Caller answered by the timer may reuse them while Redis
// still reads the commands.
func (w *worker) build(ctx context.Context, p *pipe) {
	prefix := w.s.cfg.Prefix
	w.arena = w.arena[:0]
	w.ends = w.ends[:0]
	for j := range p.refs {
		r := &p.refs[j]
		op := &r.c.ops[r.i]
		r.str = int32(len(w.ends))
		w.arena = append(w.arena, prefix...)
		w.arena = append(w.arena, op.Key...)
		w.ends = append(w.ends, len(w.arena))
		if r.kind == decide.Reset {
			continue
		}
		// The formatting of bucket.AcquireArgs: the shortest decimal that
		// reads back as the same float64.
		w.arena = strconv.AppendFloat(w.arena, op.Limit.Capacity, 'g', -1, 64)
		w.ends = append(w.ends, len(w.arena))
		w.arena = strconv.AppendFloat(w.arena, op.Limit.Rate, 'g', -1, 64)
		w.ends = append(w.ends, len(w.arena))
		w.arena = strconv.AppendFloat(w.arena, op.Cost, 'g', -1, 64)
		w.ends = append(w.ends, len(w.arena))
	}
	all := string(w.arena)
	p.strs = make([]string, len(w.ends))
	from := 0
	for k, end := range w.ends {
		p.strs[k] = all[from:end]
		from = end
	}
	p.answered = make([]atomic.Uint32, len(p.refs))
	p.at = make([]answerAt, len(p.refs))
	p.cmds = make([]*redis.Cmd, 0, len(p.refs))
	p.args = make([]any, 0, scriptArgs*len(p.refs))
	per := batchKeys
	if w.s.cluster != nil {
		per = 1
	}
	// Runs of script operations become batch commands; a reset (DEL)
	// ends a run, so every key sees its operations in order.
	for j := 0; j < len(p.refs); {
		end := j + 1
		for end < len(p.refs) && end-j < per && p.refs[j].kind != decide.Reset && p.refs[end].kind != decide.Reset {
			end++
		}
		cmd := int32(len(p.cmds))
		if end-j == 1 {
			p.at[j] = answerAt{cmd: cmd, elem: -1}
			p.cmds = append(p.cmds, p.scriptCmd(ctx, j, false))
		} else {
			for k := j; k < end; k++ {
				p.at[k] = answerAt{cmd: cmd, elem: int32(k - j)}
			}
			p.cmds = append(p.cmds, p.batchCmd(ctx, j, end))
		}
		j = end
	}
}

// batchCmd returns one EVALSHA for the script operations j..end-1 of p.
func (p *pipe) batchCmd(ctx context.Context, j, end int) *redis.Cmd {
	start := len(p.args)
	p.args = append(p.args, "evalsha", &scriptSHA, &numKeys[end-j])
	for i := j; i < end; i++ {
		p.args = append(p.args, &p.strs[p.refs[i].str])
	}
	for i := j; i < end; i++ {
		s := p.refs[i].str
		p.args = append(p.args, &p.strs[s+1], &p.strs[s+2], &p.strs[s+3], opOf(p.refs[i].kind), "", "")
	}
	cmd := redis.NewCmd(ctx, p.args[start:len(p.args):len(p.args)]...)
	cmd.SetFirstKeyPos(3)
	return cmd
}

// opOf is the script's op for an operation kind.
func opOf(k decide.Kind) *string {
	if k == decide.Peek {
		return &opPeek
	}
	return &opAcquire
}

// scriptCmd returns the command for operation i of p: DEL for a reset,
// else EVALSHA, or EVAL with eval set. ARGV[5] (now) is empty, so the
// script reads Redis TIME (bucket.RedisTime). The arguments are appended
// to p.args, whose capacity build sets for the first round.
func (p *pipe) scriptCmd(ctx context.Context, i int, eval bool) *redis.Cmd {
	r := &p.refs[i]
	key := &p.strs[r.str]
	start := len(p.args)
	if r.kind == decide.Reset {
		p.args = append(p.args, "del", key)
		cmd := redis.NewCmd(ctx, p.args[start:len(p.args):len(p.args)]...)
		cmd.SetFirstKeyPos(1)
		return cmd
	}
	op := opOf(r.kind)
	s := r.str
	if eval {
		p.args = append(p.args, "eval", &scriptSrc)
	} else {
		p.args = append(p.args, "evalsha", &scriptSHA)
	}
	p.args = append(p.args, &numKeys[1], key, &p.strs[s+1], &p.strs[s+2], &p.strs[s+3], op, "", "")
	cmd := redis.NewCmd(ctx, p.args[start:len(p.args):len(p.args)]...)
	cmd.SetFirstKeyPos(3)
	return cmd
}
