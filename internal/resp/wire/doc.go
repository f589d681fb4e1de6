// Package wire is the Redis protocol on the wire, and nothing above it:
// framing a connection's byte stream into commands with the limits that
// protect the server (Reader), encoding replies in RESP2 or RESP3
// (Writer), and parsing the numbers and words of arguments.
//
// Ownership: a Reader and a Writer belong to one connection and are used by
// its goroutine only. The arguments a Reader hands out point into its
// buffer and are valid until its next ReadCommands; whoever keeps one
// longer (a transaction's queue) copies it. A Writer's bytes stay in memory
// until Flush writes them.
//
// Each command is framed once: the Reader finds the frame, checks it
// against its Limits as the bytes arrive, and slices the arguments out of
// the buffer it read them into, with no copy and no allocation in a steady
// state.
package wire
