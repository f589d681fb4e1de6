package wire

import (
	"strconv"
	"unsafe"
)

// ParseNumber parses a decimal number written the way Redis writes floats:
// an optional sign, digits with an optional fraction, an optional exponent
// ("-1.5", "10", ".5", "2.", "1e3", "1E+3"). Hex, underscores, blanks,
// "inf", "nan", empty input and anything else report false. It does not
// allocate.
func ParseNumber(b []byte) (float64, bool) {
	if !isDecimal(b) {
		return 0, false
	}
	// Fast path: short plain integers are exact in float64.
	if len(b) <= 15 {
		var n int64
		plain := true
		for _, c := range b {
			if c < '0' || c > '9' {
				plain = false
				break
			}
			n = n*10 + int64(c-'0')
		}
		if plain {
			return float64(n), true
		}
	}
	// The grammar check above leaves only forms ParseFloat reads exactly as
	// Redis's strtold would. ParseFloat does not keep the string.
	f, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(b), len(b)), 64)
	if err != nil {
		return 0, false // out of float64 range
	}
	return f, true
}

// isDecimal checks the grammar [+-]? (d+ (. d*)? | . d+) ([eE] [+-]? d+)?
func isDecimal(b []byte) bool {
	i := 0
	if i < len(b) && (b[i] == '+' || b[i] == '-') {
		i++
	}
	intDigits := 0
	for i < len(b) && isDigit(b[i]) {
		i++
		intDigits++
	}
	fracDigits := 0
	if i < len(b) && b[i] == '.' {
		i++
		for i < len(b) && isDigit(b[i]) {
			i++
			fracDigits++
		}
	}
	if intDigits+fracDigits == 0 {
		return false
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		expDigits := 0
		for i < len(b) && isDigit(b[i]) {
			i++
			expDigits++
		}
		if expDigits == 0 {
			return false
		}
	}
	return i == len(b)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// ParseInt parses a Redis integer argument (SELECT, HELLO) or the number of
// a RESP header line: an optional '-' and at most 18 digits, so it cannot
// overflow.
func ParseInt(b []byte) (int64, bool) {
	neg := false
	if len(b) > 0 && b[0] == '-' {
		neg, b = true, b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// EqualFold reports whether b equals the ASCII word upper, ignoring case.
// upper must be upper case. It does not allocate, unlike
// strings.ToLower(string(b)).
func EqualFold(b []byte, upper string) bool {
	if len(b) != len(upper) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c != upper[i] {
			return false
		}
	}
	return true
}
