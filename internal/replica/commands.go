package replica

import (
	"strconv"

	"github.com/bucketd/bucketd/internal/bucket"
	"github.com/bucketd/bucketd/internal/shard"
)

// The command words, ops, script and numkeys values as variables, so that
// commands carry pointers to them: go-redis writes a *string argument as
// the string, and a pointer goes into an interface without an allocation
// where a string value would be copied to the heap.
var (
	wordEvalSha = "evalsha"
	wordEval    = "eval"
	scriptSHA   = bucket.ScriptSHA1
	scriptSrc   = bucket.Script
	opPut       = bucket.OpPut
	opDel       = bucket.OpDel
	numKeys     = func() []string {
		n := make([]string, batchKeys+1)
		for i := range n {
			n[i] = strconv.Itoa(i)
		}
		return n
	}()
)

// encoder builds the script commands of one write. Keys (with the prefix)
// and numbers of all changes are formatted into one buffer that becomes one
// string; the commands point into it. Its buffers are reused from one write
// to the next; the strings and argument slices of a write are new, because
// go-redis may still hold a command of a write that timed out.
type encoder struct {
	buf  []byte
	ends []int
}

// commands returns the arguments of the script calls that write changes,
// per changes to a call, as EVAL (with the script) or EVALSHA. Every
// change's ARGV are what bucket.PutArgs or bucket.DelArgs return.
func (e *encoder) commands(prefix string, changes []shard.Change, per int, useEval bool) [][]any {
	e.buf, e.ends = e.buf[:0], e.ends[:0]
	// For each change, the index in strs of its key, capacity, rate, ts
	// and tokens (a deletion: key and ts). Changes with the limit of the
	// change before them share its formatted capacity and rate: most
	// buckets share a few limits, and formatting floats is the larger part
	// of the work here.
	at := make([][5]int32, len(changes))
	add := func() int32 {
		e.ends = append(e.ends, len(e.buf))
		return int32(len(e.ends) - 1)
	}
	var last bucket.Limit
	limitAt := [2]int32{-1, -1}
	for i := range changes {
		c := &changes[i]
		e.buf = append(e.buf, prefix...)
		e.buf = append(e.buf, c.Key...)
		at[i][0] = add()
		if c.Deleted {
			e.buf = strconv.AppendInt(e.buf, c.At, 10)
			at[i][3] = add()
			continue
		}
		// The formatting of bucket.PutArgs: the shortest decimal that
		// reads back as the same float64.
		if limitAt[0] < 0 || c.Limit != last {
			e.buf = strconv.AppendFloat(e.buf, c.Limit.Capacity, 'g', -1, 64)
			limitAt[0] = add()
			e.buf = strconv.AppendFloat(e.buf, c.Limit.Rate, 'g', -1, 64)
			limitAt[1] = add()
			last = c.Limit
		}
		at[i][1], at[i][2] = limitAt[0], limitAt[1]
		e.buf = strconv.AppendInt(e.buf, c.State.Last, 10)
		at[i][3] = add()
		e.buf = strconv.AppendFloat(e.buf, c.State.Tokens, 'g', -1, 64)
		at[i][4] = add()
	}
	all := string(e.buf)
	strs := make([]string, len(e.ends))
	from := 0
	for k, end := range e.ends {
		strs[k] = all[from:end]
		from = end
	}

	word, script := &wordEvalSha, &scriptSHA
	if useEval {
		word, script = &wordEval, &scriptSrc
	}
	calls := (len(changes) + per - 1) / per
	args := make([]any, 0, 3*calls+(1+bucket.ArgsPerKey)*len(changes))
	cmds := make([][]any, 0, calls)
	for i := 0; i < len(changes); i += per {
		end := min(i+per, len(changes))
		start := len(args)
		args = append(args, word, script, &numKeys[end-i])
		for j := i; j < end; j++ {
			args = append(args, &strs[at[j][0]])
		}
		for j := i; j < end; j++ {
			a := &at[j]
			if changes[j].Deleted {
				args = append(args, "", "", "", &opDel, &strs[a[3]], "")
			} else {
				args = append(args, &strs[a[1]], &strs[a[2]], "", &opPut, &strs[a[3]], &strs[a[4]])
			}
		}
		cmds = append(cmds, args[start:len(args):len(args)])
	}
	return cmds
}
