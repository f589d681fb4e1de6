package wire

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
		if word, p, ok = inlineWord(line, p); !ok {
			return nil, false
		}
		if word == nil {
			word = []byte{} // "" is an empty argument, not a missing one
		}
		words = append(words, word)
	}
}

// inlineWord reads the word that starts at line[p], and returns it and the
// position after it. A quote ends the word where it closes.
func inlineWord(line []byte, p int) (word []byte, next int, ok bool) {
	for p < len(line) && !isBlank(line[p]) {
		switch line[p] {
		case '"':
			return doubleQuoted(word, line, p+1)
		case '\'':
			return singleQuoted(word, line, p+1)
		}
		word = append(word, line[p])
		p++
	}
	return word, p, true
}

// doubleQuoted appends to word the "double-quoted" part that starts at
// line[p], just after the opening quote, and returns the position after the
// closing quote. ok is false if the quote is not closed, or is closed and
// followed by something other than a blank.
func doubleQuoted(word, line []byte, p int) (_ []byte, next int, ok bool) {
	for ; p < len(line); p++ {
		switch c := line[p]; {
		case c == '\\' && p+3 < len(line) && line[p+1] == 'x' && isHex(line[p+2]) && isHex(line[p+3]):
			word = append(word, hexValue(line[p+2])<<4|hexValue(line[p+3]))
			p += 3
		case c == '\\' && p+1 < len(line):
			p++
			word = append(word, unescape(line[p]))
		case c == '"':
			return closeQuote(word, line, p)
		default:
			word = append(word, c)
		}
	}
	return nil, 0, false
}

// singleQuoted is doubleQuoted for a 'single-quoted' part, in which only \'
// is an escape.
func singleQuoted(word, line []byte, p int) (_ []byte, next int, ok bool) {
	for ; p < len(line); p++ {
		switch c := line[p]; {
		case c == '\\' && p+1 < len(line) && line[p+1] == '\'':
			p++
			word = append(word, '\'')
		case c == '\'':
			return closeQuote(word, line, p)
		default:
			word = append(word, c)
		}
	}
	return nil, 0, false
}

// closeQuote ends a word at the closing quote line[p], which must be
// followed by a blank or the end of the line.
func closeQuote(word, line []byte, p int) (_ []byte, next int, ok bool) {
	if p+1 < len(line) && !isBlank(line[p+1]) {
		return nil, 0, false
	}
	return word, p + 1, true
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
