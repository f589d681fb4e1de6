package wire

import (
	"math"
	"strconv"
	"testing"
)

func TestParseNumber(t *testing.T) {
	good := map[string]float64{
		"0": 0, "1": 1, "10": 10, "+5": 5, "-2": -2, "0.5": 0.5, ".5": 0.5, "2.": 2,
		"1e3": 1000, "1E3": 1000, "1e+3": 1000, "2.5e-1": 0.25, "-0": 0, "007": 7,
		"1000000000000000": 1e15, "123456789012345": 123456789012345,
		"0.000001": 1e-6, "1e-300": 1e-300,
	}
	for in, want := range good {
		got, ok := ParseNumber([]byte(in))
		if !ok || got != want {
			t.Errorf("ParseNumber(%q) = %v, %v; want %v", in, got, ok, want)
		}
	}
	bad := []string{
		"", " ", " 1", "1 ", "+", "-", ".", "e3", "1e", "1e+", "0x10", "0X1A", "1_000",
		"inf", "-inf", "Inf", "infinity", "nan", "NaN", "1.2.3", "1e3.5", "--1", "+-1",
		"1,5", "1e999", "abc", "1a", "\x00", "٣", "0b1", "1p3", "0x1p3",
	}
	for _, in := range bad {
		if got, ok := ParseNumber([]byte(in)); ok {
			t.Errorf("ParseNumber(%q) = %v, accepted; want rejected", in, got)
		}
	}
}

func TestParseNumberAllocatesNothing(t *testing.T) {
	inputs := [][]byte{[]byte("100"), []byte("0.5"), []byte("1e3"), []byte("nan")}
	allocs := testing.AllocsPerRun(1000, func() {
		for _, in := range inputs {
			ParseNumber(in)
		}
	})
	if allocs != 0 {
		t.Fatalf("parseNumber allocates %v times per run", allocs)
	}
}

// FuzzParseNumber checks that parseNumber never panics, accepts only the
// documented grammar, and agrees with strconv.ParseFloat on what it accepts.
func FuzzParseNumber(f *testing.F) {
	for _, s := range []string{"1", "0.5", "-1e3", ".5", "2.", "1e999", "0x10", "nan", "", "+.5e-2"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := ParseNumber(b)
		if !ok {
			return
		}
		if !isDecimal(b) {
			t.Fatalf("accepted %q outside the grammar", b)
		}
		want, err := strconv.ParseFloat(string(b), 64)
		if err != nil || got != want || math.IsNaN(got) || math.IsInf(got, 0) {
			t.Fatalf("ParseNumber(%q) = %v; ParseFloat says %v, %v", b, got, want, err)
		}
	})
}

func TestEqualFold(t *testing.T) {
	for _, tc := range []struct {
		in    string
		upper string
		want  bool
	}{
		{"withinfo", "WITHINFO", true}, {"WithInfo", "WITHINFO", true}, {"WITHINFO", "WITHINFO", true},
		{"withinf", "WITHINFO", false}, {"withinfos", "WITHINFO", false}, {"tb.acquire", "TB.ACQUIRE", true},
		{"tb_acquire", "TB.ACQUIRE", false}, {"", "", true}, {"\xe9", "\xc9", false},
	} {
		if got := EqualFold([]byte(tc.in), tc.upper); got != tc.want {
			t.Errorf("EqualFold(%q, %q) = %v", tc.in, tc.upper, got)
		}
	}
}
