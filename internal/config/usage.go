package config

import (
	"fmt"
	"io"
	"strings"
)

// writeUsage writes the --help text: every flag with its environment
// variable and default, and how the sources combine.
func writeUsage(w io.Writer, defaultShards int) {
	var b strings.Builder
	b.WriteString(`Usage: bucketd [flags]
       bucketd healthcheck [URL]   exit 0 if a running bucketd's /healthz (or URL)
                                   answers 200; bucketd healthcheck --help says more

A token-bucket rate limiter that speaks the Redis protocol.
Try: redis-cli -p 6380 TB.ACQUIRE user:1 10 1

Every setting comes from, in this order of precedence: a flag, an
environment variable (BUCKETD_ and the flag name in upper snake case), the
YAML config file, the default. The keys of the config file equal the flag
names ("max-key-bytes: 2048"), plus "policies:" for named policies:

  policies:
    api:
      capacity: 100   # tokens
      rate: 10        # tokens per second, or N/second, N/minute, N/hour, N/day

Booleans take true/false, yes/no or 1/0 (--protected-mode=false). A reload
(SIGHUP) re-reads the file and the environment: policies and log-level apply
at once; other changes need a restart. See docs/configuration.md.

Flags:
`)
	entry(&b, "config", "file", "YAML config file with settings and policies; a reload reads the same file",
		"BUCKETD_CONFIG", "none")
	def := defaults(defaultShards)
	for i := range settings {
		s := &settings[i]
		d := s.get(&def)
		switch {
		case s.name == "shards":
			d += " (2 x GOMAXPROCS)"
		case d == "":
			d = "none"
		}
		entry(&b, s.name, s.arg, s.usage, envName(s.name), d)
	}
	// --version is handled before the settings are read (cmd/bucketd), so
	// it is no setting: no environment variable, no file key, no default.
	b.WriteString("  --version\n")
	for _, line := range wrap("print the version (bucketd VERSION GOVERSION OS/ARCH) and exit; the other flags are ignored", 72) {
		fmt.Fprintf(&b, "        %s\n", line)
	}
	b.WriteString("\nEnvironment: GOMAXPROCS sets the number of OS threads running Go code (default: all CPUs).\n")
	fmt.Fprint(w, b.String())
}

func entry(b *strings.Builder, name, arg, usage, env, def string) {
	fmt.Fprintf(b, "  --%s %s\n", name, arg)
	for _, line := range wrap(usage, 72) {
		fmt.Fprintf(b, "        %s\n", line)
	}
	fmt.Fprintf(b, "        env %s, default %s\n", env, def)
}

// wrap splits s into lines of at most width bytes at spaces.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}
