package config

import (
	"io"
	"strings"
	"testing"
)

// TestClientOutputBufferLimit: Redis's syntax, from a flag, the
// environment or the file; a group changes only its class, so a source
// that names one class keeps the other from the sources below it.
func TestClientOutputBufferLimit(t *testing.T) {
	file := writeFile(t, "client-output-buffer-limit: pubsub 1mb 256kb 10\n")
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"default", nil, nil, "normal 33554432 8388608 60 pubsub 33554432 8388608 60"},
		{"Redis's no limit for normal clients", []string{"--client-output-buffer-limit", "normal 0 0 0"}, nil,
			"normal 0 0 0 pubsub 33554432 8388608 60"},
		{"both, any case, Redis's units", []string{"--client-output-buffer-limit", "NORMAL 1GB 100m 5 pubsub 100k 65536b 0"}, nil,
			"normal 1073741824 100000000 5 pubsub 100000 65536 0"},
		{"the file names pubsub, the environment normal", []string{"--config", file},
			map[string]string{"BUCKETD_CLIENT_OUTPUT_BUFFER_LIMIT": "normal 128mb 0 0"},
			"normal 134217728 0 0 pubsub 1048576 262144 10"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(tc.args, envOf(tc.env), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if got := clientOutputBufferLimit.get(&c); got != tc.want {
				t.Fatalf("client-output-buffer-limit = %q, want %q", got, tc.want)
			}
		})
	}
	c, err := Load([]string{"--client-output-buffer-limit", "pubsub 1mb 256kb 10"}, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := (OutputBufferLimit{HardBytes: 1 << 20, SoftBytes: 256 << 10, SoftSeconds: 10}); c.OutputBufferLimits.PubSub != want {
		t.Fatalf("PubSub = %+v, want %+v", c.OutputBufferLimits.PubSub, want)
	}
	for _, bad := range []string{
		"", "normal", "normal 1mb 1mb", "normal 64 16 60", "normal 1mb 1kb 60", "normal x 0 0", "normal 1mb 0 -1",
		"normal 1mb 0 1.5", "normal -1mb 0 0", "normal +1mb 0 0", "normal 1tb 0 0", "normal kb 0 0", "replica 256mb 64mb 60",
		"nosuch 1mb 0 0", "normal 99999999999999999999 0 0",
	} {
		_, err := Load([]string{"--client-output-buffer-limit", bad}, nil, io.Discard)
		if err == nil || !strings.Contains(err.Error(), `use one or more groups of "class hard soft soft-seconds"`) {
			t.Errorf("%q: %v, want the hint", bad, err)
		}
	}
}
