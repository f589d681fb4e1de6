package wire

import (
	"strings"
	"testing"
)

func TestSplitInlineLikeRedis(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string // nil: unbalanced quotes
	}{
		{"PING", []string{"PING"}},
		{"  set\tk \v v \f", []string{"set", "k", "v"}},
		{`echo "a b"`, []string{"echo", "a b"}},
		{`echo a"b c"d`, nil},
		{`echo a"b c"`, []string{"echo", "ab c"}},
		{`echo "\x41\x4a\n\t\\\"q"`, []string{"echo", "AJ\n\t\\\"q"}},
		{`echo "\xZZ"`, []string{"echo", "xZZ"}},
		{`echo 'it\'s' ''`, []string{"echo", "it's", ""}},
		{`echo 'a\nb'`, []string{"echo", `a\nb`}},
		{`echo "abc`, nil},
		{`echo 'abc`, nil},
		{`echo "a"b`, nil},
		{"", []string{}},
	} {
		words, ok := splitInline([]byte(tc.in))
		if tc.want == nil {
			if ok {
				t.Errorf("%q: split into %q, want unbalanced quotes", tc.in, words)
			}
			continue
		}
		got := make([]string, len(words))
		for i, w := range words {
			got[i] = string(w)
		}
		if !ok || strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
			t.Errorf("%q: got %q (ok %v), want %q", tc.in, got, ok, tc.want)
		}
	}
}
