package command

import "sync/atomic"

// Stats are the command layer's counters, read from atomics.
type Stats struct {
	TotalCommands int64   // the sum of Commands
	Commands      []int64 // by command, indexed like CommandNames()
	Errors        [numErrorKinds]int64
	// Decisions are the decisions of the bucket commands by policy: first
	// those of calls with explicit limits and of CL.THROTTLE (Name ""),
	// then those of each policy in force, in name order (policies.go).
	Decisions []PolicyStats
}

// counters are the Engine's atomics. Per-command counts are added once per
// batch from a connection-local tally, not once per command, so the hot
// path does not bounce a shared cache line between cores.
type counters struct {
	commands  [maxCmdIDs]atomic.Int64
	errors    [numErrorKinds]atomic.Int64
	decisions [numResults]atomic.Int64 // calls with explicit limits, CL.THROTTLE
}

// Stats returns the command layer's counters.
func (e *Engine) Stats() Stats {
	st := Stats{Commands: make([]int64, numCommands()), Decisions: e.policyStats()}
	for i := range st.Commands {
		st.Commands[i] = e.n.commands[i].Load()
		st.TotalCommands += st.Commands[i] // every command is counted under its name, unknown ones as "other"
	}
	for i := range st.Errors {
		st.Errors[i] = e.n.errors[i].Load()
	}
	return st
}

// tally is one connection's counts for the batch being answered.
type tally struct {
	commands  [maxCmdIDs]int32
	errors    [numErrorKinds]int32
	decisions [numResults]int32 // of calls with explicit limits and CL.THROTTLE
	any       bool
}

func (t *tally) command(id cmdID)  { t.commands[id]++; t.any = true }
func (t *tally) error(k ErrorKind) { t.errors[k]++; t.any = true }

// decision counts a decision of a call with explicit limits.
func (t *tally) decision(result int) { t.decisions[result]++; t.any = true }

// flushTally adds a connection's tally to the shared counters and clears it.
func (e *Engine) flushTally(t *tally) {
	if !t.any {
		return
	}
	for i, n := range t.commands[:numCommands()] {
		if n != 0 {
			e.n.commands[i].Add(int64(n))
			t.commands[i] = 0
		}
	}
	for i, n := range t.errors {
		if n != 0 {
			e.n.errors[i].Add(int64(n))
			t.errors[i] = 0
		}
	}
	for i, n := range t.decisions {
		if n != 0 {
			e.n.decisions[i].Add(int64(n))
			t.decisions[i] = 0
		}
	}
	t.any = false
}
