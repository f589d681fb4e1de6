package resp

import "strconv"

// splitInline splits one inline command line (without its line ending) into
// words exactly as Redis does (sds.c sdssplitargs): words are separated by
// blanks (space, tab, CR, LF, VT, FF); "double quotes" understand \n \r \t \b
// \a \xHH and backslash-anything escapes; 'single quotes' understand only
// \'; a quote may start in the middle of a word ("a"b"" is "ab"); a closing
// quote must be followed by a blank or the end. ok is false for unbalanced
// quotes.
func splitInline(line []byte) (words [][]byte, ok bool) {
	p := 0
	for {
		for p < len(line) && isBlank(line[p]) {
			p++
		}
		if p == len(line) {
			return words, true
		}
		var word []byte
		inDouble, inSingle := false, false
		for done := false; !done; {
			switch {
			case inDouble:
				switch {
				case p >= len(line):
					return nil, false // unterminated quotes
				case line[p] == '\\' && p+3 < len(line) && line[p+1] == 'x' && isHex(line[p+2]) && isHex(line[p+3]):
					word = append(word, hexValue(line[p+2])<<4|hexValue(line[p+3]))
					p += 3
				case line[p] == '\\' && p+1 < len(line):
					p++
					word = append(word, unescape(line[p]))
				case line[p] == '"':
					if p+1 < len(line) && !isBlank(line[p+1]) {
						return nil, false // closing quote must be followed by a blank
					}
					done = true
				default:
					word = append(word, line[p])
				}
			case inSingle:
				switch {
				case p >= len(line):
					return nil, false
				case line[p] == '\\' && p+1 < len(line) && line[p+1] == '\'':
					p++
					word = append(word, '\'')
				case line[p] == '\'':
					if p+1 < len(line) && !isBlank(line[p+1]) {
						return nil, false
					}
					done = true
				default:
					word = append(word, line[p])
				}
			default:
				switch {
				case p >= len(line), isBlank(line[p]):
					done = true
				case line[p] == '"':
					inDouble = true
				case line[p] == '\'':
					inSingle = true
				default:
					word = append(word, line[p])
				}
			}
			if p < len(line) {
				p++
			}
		}
		if word == nil {
			word = []byte{} // "" is an empty argument, not a missing one
		}
		words = append(words, word)
	}
}

// appendMultiBulk appends words as one RESP array of bulk strings.
func appendMultiBulk(dst []byte, words [][]byte) []byte {
	dst = append(dst, '*')
	dst = strconv.AppendInt(dst, int64(len(words)), 10)
	dst = append(dst, '\r', '\n')
	for _, w := range words {
		dst = append(dst, '$')
		dst = strconv.AppendInt(dst, int64(len(w)), 10)
		dst = append(dst, '\r', '\n')
		dst = append(dst, w...)
		dst = append(dst, '\r', '\n')
	}
	return dst
}

func isBlank(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func hexValue(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

func unescape(c byte) byte {
	switch c {
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	case 'b':
		return '\b'
	case 'a':
		return '\a'
	default:
		return c
	}
}
