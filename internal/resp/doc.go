// Package resp is bucketd's Redis-protocol front: the connection server.
// It is one of three layers, each a package:
//
//   - resp/wire, the protocol on the wire: framing a byte stream into
//     commands with the limits that protect the server, and encoding
//     replies in RESP2 or RESP3;
//   - resp (this package), the connections: accepting and refusing them
//     (--max-clients, protected mode), TLS, idle timeouts, graceful
//     shutdown, and each connection's loop;
//   - resp/command, the commands: what each one means, the command table,
//     transactions, client-side caching, INFO. It is the Handler this
//     package calls; this package knows nothing of commands.
//
// The model is read, plan, flush. A connection's goroutine reads whatever
// one read brings (wire.Reader.ReadCommands: every command a write brought,
// so a pipeline sent in one write is handed on whole), hands all of it to
// its Session, which plans the bucket commands, sends their requests to
// the store together and writes every reply into the connection's
// wire.Writer, and then writes those replies with one system call. So a
// pipeline costs one round trip to each shard, not one per command, and
// one write. What the replies of one read may make the server hold is
// bounded by the connection's output limits (output.go).
//
// Ownership: a Conn, its Reader, its Writer and its Session belong to the
// connection's goroutine. The Server's connection set is guarded by a
// mutex that only accepting, closing and shutdown take; the counters are
// atomics. Nothing on the request path locks.
//
// Nothing blocking runs in the accept loop (accept.go): a silent or slow
// socket never delays another client's connection, with or without TLS.
package resp
