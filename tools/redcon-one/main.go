// Command redcon-one is the baseline of the benchmarks: a bare redcon
// server that answers :1 to every command (and +PONG to PING, which the
// scripts use to see it is up), the protocol's own cost with nothing
// decided (see docs/benchmarks.md). It takes bucketd's --addr and
// ignores bucketd's other flags, so that scripts/bench-ab.sh can start it
// as one of its sides (BARE=1).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/tidwall/redcon"
)

func main() {
	fs := flag.NewFlagSet("redcon-one", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:6399", "host:port to listen on")
	fs.String("metrics-addr", "", "ignored: bucketd's flag")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	err := redcon.ListenAndServe(*addr,
		func(conn redcon.Conn, cmd redcon.Command) {
			if len(cmd.Args[0]) == 4 && string(cmd.Args[0]) == "PING" {
				conn.WriteString("PONG")
				return
			}
			conn.WriteInt(1)
		},
		func(conn redcon.Conn) bool { return true },
		func(conn redcon.Conn, err error) {},
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, "redcon-one:", err)
		os.Exit(1)
	}
}
