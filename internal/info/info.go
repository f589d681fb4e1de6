// Package info holds the shape of one section of the INFO reply, so that
// each package formats the section that shows its own state (the shards,
// replication, the Redis store) and the protocol front only writes them
// out. It imports nothing of bucketd.
package info

import "strconv"

// Section is one "# Title" block of INFO; a client asks for it by its
// title in lower case.
type Section struct {
	Title  string
	Fields []Field
}

// Field is one "name:value" line of a Section.
type Field struct {
	Name  string
	Value string
}

// Int returns a field with an integer value.
func Int(name string, v int64) Field { return Field{name, strconv.FormatInt(v, 10)} }

// Text returns a field with a text value.
func Text(name, v string) Field { return Field{name, v} }

// Seconds returns a field with a value in seconds, to the millisecond.
func Seconds(name string, v float64) Field {
	return Field{name, strconv.FormatFloat(v, 'f', 3, 64)}
}

// Append writes s to dst as INFO text: the title line, then a line per
// field, each ending in CRLF.
func Append(dst []byte, s Section) []byte {
	dst = append(dst, "# "...)
	dst = append(dst, s.Title...)
	dst = append(dst, '\r', '\n')
	for _, f := range s.Fields {
		dst = append(dst, f.Name...)
		dst = append(dst, ':')
		dst = append(dst, f.Value...)
		dst = append(dst, '\r', '\n')
	}
	return dst
}
