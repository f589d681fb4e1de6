// Package config builds bucketd's validated Config from four sources, in
// this order of precedence: command-line flags, BUCKETD_… environment
// variables, a YAML config file, and the defaults. It owns the list of
// settings, their defaults, their validation and the --help text; it knows
// nothing of the server and imports no other bucketd package.
//
// Invariants:
//   - a Config returned without an error is complete and valid: every value
//     is in range, the TLS files load, and the settings that exclude each
//     other (store, store-cluster, replicate; store mode and data-dir or
//     max-buckets) are not combined;
//   - every value given by any source is checked, even one a higher source
//     overrides, so a bad environment variable or file key never hides;
//   - errors name their source (--flag, BUCKETD_VAR or file:line: key) and
//     say what to do, and never echo a password;
//   - flags are parsed once, by Load, and kept in the Config: Reload re-reads
//     the file and the environment, but a flag keeps winning;
//   - a policy (internal/policy, the model this package decodes into) has
//     1 to policy.MaxLimits limits with distinct names.
//
// A Config is a plain value, safe to copy and to read from many goroutines;
// its Policies map and StoreCluster slice are shared between copies and must
// not be modified.
package config
