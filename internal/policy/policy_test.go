package policy

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/bucketd/bucketd/internal/redistest"
)

// multi is a policy with limits named names (the numbers do not matter
// for keys).
func multi(prefix string, names ...string) Policy {
	p := Policy{Prefix: prefix}
	for _, n := range names {
		p.Limits = append(p.Limits, Limit{Name: n, Capacity: 1, Rate: 1})
	}
	return p
}

func TestAppendKey(t *testing.T) {
	single, llm := one(10, 1, ""), multi("", "minute", "day")
	cases := []struct {
		name string
		p    Policy
		key  string
		want []string // the key of each limit
	}{
		{"one limit: the key", single, "user:1", []string{"user:1"}},
		{"one limit: prefix + key", one(10, 1, "login:"), "1.2.3.4", []string{"login:1.2.3.4"}},
		{"one limit in a list, named", multi("p:", "burst"), "user:1", []string{"p:user:1"}},
		{"one limit: empty key", single, "", []string{""}},
		{"several: {K}:name", llm, "user:1", []string{"{user:1}:minute", "{user:1}:day"}},
		{"prefix inside the braces", multi("llm:", "minute", "day"), "user:1", []string{"{llm:user:1}:minute", "{llm:user:1}:day"}},
		{"the key's own tag", llm, "{org:5}:user:1", []string{"{org:5}:user:1:minute", "{org:5}:user:1:day"}},
		{"a tag in the prefix", multi("{llm}:", "minute", "day"), "user:1", []string{"{llm}:user:1:minute", "{llm}:user:1:day"}},
		{"a key that is a tag", llm, "{user:1}", []string{"{user:1}:minute", "{user:1}:day"}},
		{"an empty tag is no tag", llm, "a{}b", []string{"{a{}b}:minute", "{a{}b}:day"}},
		{"a '{' without '}'", llm, "a{b", []string{"{a{b}:minute", "{a{b}:day"}},
		{"a '}' before the '{'", llm, "a}b{c}", []string{"a}b{c}:minute", "a}b{c}:day"}},
		{"a '}' alone", llm, "a}b", []string{"{a}b}:minute", "{a}b}:day"}},
		{"empty key", llm, "", []string{"{{}:minute", "{{}:day"}},
		{"key starting with '}'", llm, "}x", []string{"{{}x}:minute", "{{}x}:day"}},
		{"prefix starting with '}'", multi("}p:", "a", "b"), "x", []string{"{{}p:x}:a", "{{}p:x}:b"}},
		{"prefix, empty key", multi("p:", "a", "b"), "", []string{"{p:}:a", "{p:}:b"}},
		{"sixteen", multi("", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p"), "k",
			[]string{"{k}:a", "{k}:b", "{k}:c", "{k}:d", "{k}:e", "{k}:f", "{k}:g", "{k}:h", "{k}:i", "{k}:j", "{k}:k", "{k}:l", "{k}:m", "{k}:n", "{k}:o", "{k}:p"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.want) != len(tc.p.Limits) {
				t.Fatalf("the case gives %d keys for %d limits", len(tc.want), len(tc.p.Limits))
			}
			for i, want := range tc.want {
				got := tc.p.AppendKey([]byte("before|"), []byte(tc.key), i)
				if string(got) != "before|"+want {
					t.Errorf("limit %d: %q, want %q", i, got, "before|"+want)
				}
				for _, r := range []string{"", "tb:"} { // with and without --replicate-prefix
					if redisSlot(r+want) != redisSlot(r+tc.want[0]) {
						t.Errorf("%q and %q are in different hash slots", r+want, r+tc.want[0])
					}
				}
			}
		})
	}
}

// TestAppendKeyEveryShape: over every key of up to 5 bytes from a, :, {
// and } and several prefixes, the keys of one call share a hash slot, and
// two different keys without braces never share a bucket.
func TestAppendKeyEveryShape(t *testing.T) {
	keys := []string{""}
	for range 5 {
		for _, k := range keys {
			if len(k) == len(keys[len(keys)-1]) {
				for _, c := range "a:{}" {
					keys = append(keys, k+string(c))
				}
			}
		}
	}
	for _, prefix := range []string{"", "p:", "{t}:", "}", "{", "x{"} {
		p := multi(prefix, "second", "day", "x")
		owner := map[string]string{} // derived key -> the client key
		for _, k := range keys {
			first := string(p.AppendKey(nil, []byte(k), 0))
			for i := range p.Limits {
				d := string(p.AppendKey(nil, []byte(k), i))
				for _, r := range []string{"", "tb:"} {
					if redisSlot(r+d) != redisSlot(r+first) {
						t.Fatalf("prefix %q, key %q: %q and %q are in different slots", prefix, k, r+d, r+first)
					}
				}
				if strings.ContainsAny(k, "{}") {
					continue
				}
				if o, taken := owner[d]; taken {
					t.Fatalf("prefix %q: keys %q and %q share the bucket %q", prefix, o, k, d)
				}
				owner[d] = k
			}
		}
	}
}

func TestAppendKeyAllocatesNothing(t *testing.T) {
	p, key := multi("llm:", "minute", "day"), []byte("user:1")
	buf := make([]byte, 0, 64)
	if n := testing.AllocsPerRun(100, func() {
		buf = p.AppendKey(buf[:0], key, 1)
		buf = one(1, 1, "x:").AppendKey(buf[:0], key, 0)
	}); n != 0 {
		t.Fatalf("%v allocations per call, want 0", n)
	}
}

// TestRedisSlotMatchesRedis holds the test's redisSlot, and so the slot
// checks above, to what a real cluster-enabled redis-server answers.
func TestRedisSlotMatchesRedis(t *testing.T) {
	if redisSlot("somekey") != 11058 || redisSlot("foo{hash_tag}") != 2515 { // from Redis's CLUSTER KEYSLOT page
		t.Fatalf("redisSlot: somekey %d, foo{hash_tag} %d", redisSlot("somekey"), redisSlot("foo{hash_tag}"))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bus := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	srv := redistest.Start(t, "--cluster-enabled", "yes", "--cluster-port", bus)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	p := multi("", "minute", "day")
	for _, k := range []string{"user:1", "{org:5}:user:1", "", "}x", "a{}b", "a}b", "{", "}", "{}", "{{}}"} {
		for i := range p.Limits {
			d := "tb:" + string(p.AppendKey(nil, []byte(k), i))
			got, err := c.ClusterKeySlot(context.Background(), d).Result()
			if err != nil {
				t.Fatal(err)
			}
			if int(got) != redisSlot(d) {
				t.Errorf("CLUSTER KEYSLOT %q = %d, redisSlot says %d", d, got, redisSlot(d))
			}
		}
	}
}

// redisSlot is Redis Cluster's key slot: CRC16 (XMODEM) of the key, or of
// its non-empty {hash tag}, mod 16384.
func redisSlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// one is a policy of one limit written with capacity and a plain rate.
func one(capacity, rate float64, prefix string) Policy {
	return Policy{Limits: []Limit{{Name: "second", Capacity: capacity, Rate: rate}}, Prefix: prefix}
}
