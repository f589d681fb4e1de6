package config

import (
	"github.com/bucketd/bucketd/internal/policy"

	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"go.yaml.in/yaml/v3"
)

// fileEntry is one setting from the config file, as text.
type fileEntry struct {
	key   string
	value string
	line  int
}

// fileValues is what the config file says, checked for its structure and
// for unknown keys; the values themselves are checked by the settings.
type fileValues struct {
	values       []fileEntry              // in file order
	policies     map[string]policy.Policy // nil when the file has no policies key
	policiesLine int
	cut          bool // not empty, and the last byte is no newline
}

// MaxFileBytes is the largest config file bucketd reads (1 MiB): settings
// and policies take a few kilobytes, and a bound keeps a wrong path (a
// device such as /dev/zero, a log file) from filling the memory.
const MaxFileBytes = 1 << 20

// readFile reads and decodes the YAML config file at path, which came from
// the source from ("--config" or "BUCKETD_CONFIG").
func readFile(path, from string) (fileValues, error) {
	var f fileValues
	data, err := readBounded(path, from)
	if err != nil {
		return f, err
	}
	f.cut = len(data) > 0 && data[len(data)-1] != '\n'

	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return f, fmt.Errorf("config file %s: %w: fix the YAML syntax", path, err)
	}
	if len(doc.Content) == 0 {
		return f, nil // empty, or only comments
	}
	root := resolve(doc.Content[0])
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		return f, nil
	}
	if root.Kind != yaml.MappingNode {
		return f, fmt.Errorf("%s:%d: the file must be a mapping of setting names to values, like \"max-key-bytes: 2048\"",
			path, root.Line)
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], resolve(root.Content[i+1])
		key := k.Value
		if line, dup := seen[key]; dup {
			return f, fmt.Errorf("%s:%d: %s is already set on line %d: keep one of them", path, k.Line, key, line)
		}
		seen[key] = k.Line
		if key == "policies" {
			p, err := decodePolicies(path, v)
			if err != nil {
				return f, err
			}
			f.policies, f.policiesLine = p, k.Line
			continue
		}
		if _, ok := byName[key]; !ok || k.Kind != yaml.ScalarNode {
			return f, fmt.Errorf("%s:%d: unknown key %q%s: use the flag names listed by bucketd --help, or policies",
				path, k.Line, key, suggest(key))
		}
		if v.Kind != yaml.ScalarNode {
			return f, fmt.Errorf("%s:%d: %s: give a single value, not a list or a mapping", path, v.Line, key)
		}
		value := v.Value
		if v.ShortTag() == "!!null" {
			value = ""
		}
		f.values = append(f.values, fileEntry{key: key, value: value, line: v.Line})
	}
	return f, nil
}

// readBounded reads the config file at path: a regular file of at most
// MaxFileBytes. It opens without blocking, so a FIFO (which would wait for
// a writer) is refused at once, and it checks the file it opened, not the
// path, so a file swapped meanwhile is checked too; the read is bounded as
// well, for a file that grows after the check.
func readBounded(path, from string) ([]byte, error) {
	file, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("config file (from %s): %w: check the path", from, err)
	}
	defer file.Close()
	fi, err := file.Stat()
	if err != nil {
		return nil, fmt.Errorf("config file %s (from %s): %w", path, from, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("config file %s (from %s) is not a regular file but a %s: give the path of a YAML file",
			path, from, fileKind(fi.Mode()))
	}
	if fi.Size() > MaxFileBytes {
		return nil, tooLarge(path, from, fmt.Sprint(fi.Size()))
	}
	data, err := io.ReadAll(io.LimitReader(file, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config file %s (from %s): %w", path, from, err)
	}
	if len(data) > MaxFileBytes {
		return nil, tooLarge(path, from, fmt.Sprintf("more than %d", MaxFileBytes))
	}
	return data, nil
}

func tooLarge(path, from, size string) error {
	return fmt.Errorf("config file %s (from %s) is %s bytes, over the limit of %d bytes (1 MiB): a config file holds settings and policies; check the path",
		path, from, size, MaxFileBytes)
}

// fileKind names what a path that is not a regular file is.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe (FIFO)"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	case m&fs.ModeSocket != 0:
		return "socket"
	}
	return "special file"
}

// resolve follows a YAML alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// suggest returns " (did you mean max-key-bytes?)" for keys such as
// max_key_bytes, MAX-KEY-BYTES or --max-key-bytes, and "" otherwise.
func suggest(key string) string {
	k := strings.TrimLeft(strings.ToLower(strings.ReplaceAll(key, "_", "-")), "-")
	k = strings.TrimPrefix(k, "bucketd-")
	if k == "policy" {
		k = "policies"
	}
	if _, ok := byName[k]; ok || k == "policies" {
		return " (did you mean " + k + "?)"
	}
	return ""
}
