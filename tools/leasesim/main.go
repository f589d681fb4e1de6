// Command leasesim runs lease mode's simulation (internal/leasesim) over
// the table's rows and prints the markdown table of docs/leases-simulation.md:
//
//	go run ./tools/leasesim [-seed 1] [-duration 10s]
//
// A run is deterministic for a seed and a duration.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/bucketd/bucketd/internal/leasesim"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "leasesim:", err)
		os.Exit(2)
	}
}

// run parses args, runs every row and writes the table to w.
func run(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("leasesim", flag.ContinueOnError)
	seed := fs.Uint64("seed", 1, "the seed of every row")
	d := fs.Duration("duration", 10*time.Second, "simulated time per row")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *d < time.Second {
		return fmt.Errorf("duration %v: want at least 1s (the longest window)", *d)
	}
	var rs []leasesim.Result
	for _, c := range leasesim.TableRows(*seed, d.Microseconds()) {
		rs = append(rs, leasesim.Run(c))
	}
	return leasesim.WriteTable(w, rs)
}
