// Package command is bucketd's command layer: what every command means and
// answers, in the terms of internal/decide. The Engine is the resp.Handler
// the connection server calls; it keeps what all connections share (the
// store, the policies in force, the password, the counters), and each
// connection's state is its session (session.go), owned by the
// connection's goroutine.
//
// One command list: commandTable (table.go) gives every command and
// subcommand its name, arity, flags, keys and the function that answers
// it; a command's place in the table is its id in the counters. A bucket
// command has a planner, a function of the batch's pipeline (pipeline.go)
// that parses its arguments and adds its requests to the store's Caller
// without writing anything. Any other command has a handler, a function of
// the session that writes its reply at once, after the planned commands
// before it are answered, so replies keep their order. Planners and
// handlers run only after the table's checks (authentication, arity,
// subcommand) and return an error reply, which is counted by its kind
// where it is written.
//
// Plan, then flush: the bucket commands of a batch, up to the next command
// that is not one, travel to the store together (one Caller.Run), and
// their replies are then written in order from the answers. Transactions
// (transaction.go) plan at EXEC and run as one unit (RunIsolated);
// client-side caching (tracking.go) follows each tracked bucket reply with
// the invalidation of its keys.
//
// The operator commands see other connections only through what their
// sessions publish (clients.go: CLIENT LIST, INFO, KILL) and through the
// Engine's shared parts: the per-command statistics (cmdstats.go: INFO
// commandstats and latencystats, atomics indexed by the command's row),
// the slow log (slowlog.go) and the monitors (monitor.go), each bounded,
// none of which a command waits for.
//
// In a steady state nothing here allocates per command: the session's
// slices, the pipeline's plan and key arena, and the tally of counts are
// reused, and the counts reach the shared atomics once per batch (the
// per-command statistics once per run of equal commands in it).
package command
