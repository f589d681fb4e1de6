//go:build race

package gcfloor

// raceBuild: the race detector keeps shadow memory for every heap byte, so a
// floor of garbage would cost several times its size; race builds (tests)
// keep the plain GOGC.
const raceBuild = true
