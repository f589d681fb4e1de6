//go:build !linux

package doctest

import (
	"errors"
	"os"
)

// openPTY is implemented for Linux only, where the docs' sessions are
// checked (CI and scripts/test.sh).
func openPTY() (master, slave *os.File, err error) {
	return nil, nil, errors.New("doctest: shell sessions need a pseudo-terminal, implemented here for Linux only")
}
