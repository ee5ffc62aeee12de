// Package logsafe bounds what a caller sent before it goes into a log line:
// a namespace, a lock name, a session label or client id, a refusal's
// message. A caller can send megabytes in one string, and a newline or a
// terminal escape in it would make a log line that looks like another one.
// String cuts the value to a bound, says how much it cut, and escapes what
// is not printable, so that one value is at most a few hundred bytes on
// one line, in the text and in the JSON log format alike.
//
// This package is implementation, not API: it makes no compatibility
// promise.
package logsafe

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Max is the bytes of a caller's string that String keeps.
const Max = 128

// String is s cut to Max bytes and escaped (see Bound).
func String(s string) string { return Bound(s, Max) }

// Bound is s cut to at most max bytes, at a character boundary, followed by
// "…(+N bytes)" when N bytes were cut, with every character that is not
// printable (newlines, tabs, terminal escapes, bidirectional overrides),
// every byte that is not UTF-8 and every backslash escaped as Go writes
// them in a quoted string (\n, \x1b, \u202e, \xff, \\). A value that needs
// neither is returned as it is. The result is at most 4*max bytes and the
// length of the suffix.
func Bound(s string, max int) string {
	kept, cut := truncate(s, max)
	if !needsEscape(kept) {
		if cut == 0 {
			return s
		}
		return kept + suffix(cut)
	}
	var b strings.Builder
	b.Grow(len(kept) + 16)
	for i := 0; i < len(kept); {
		r, size := utf8.DecodeRuneInString(kept[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\x`)
			b.WriteByte(hex[kept[i]>>4])
			b.WriteByte(hex[kept[i]&0xf])
		case r == '\\':
			b.WriteString(`\\`)
		case unicode.IsPrint(r):
			b.WriteString(kept[i : i+size])
		default:
			q := strconv.QuoteRune(r) // '\n', '\x1b', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	if cut > 0 {
		b.WriteString(suffix(cut))
	}
	return b.String()
}

// Clip is s cut as Bound cuts it, with the same "…(+N bytes)", but not
// escaped: for a message that quotes it (strconv.Quote) itself.
func Clip(s string, max int) string {
	kept, cut := truncate(s, max)
	if cut == 0 {
		return s
	}
	return kept + suffix(cut)
}

// truncate cuts s to at most max bytes at a character boundary (a string
// that is not UTF-8 is cut at max) and reports how many bytes it cut.
func truncate(s string, max int) (kept string, cut int) {
	if max < 0 {
		max = 0
	}
	if len(s) <= max {
		return s, 0
	}
	n := max
	for n > 0 && n > max-utf8.UTFMax && !utf8.RuneStart(s[n]) {
		n--
	}
	if !utf8.RuneStart(s[n]) { // not UTF-8 here: cut where the bound is
		n = max
	}
	return s[:n], len(s) - n
}

// Strings applies String to each of ss, in a new slice.
func Strings(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = String(s)
	}
	return out
}

const hex = "0123456789abcdef"

func suffix(cut int) string { return "…(+" + strconv.Itoa(cut) + " bytes)" }

func needsEscape(s string) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || r == '\\' || !unicode.IsPrint(r) {
			return true
		}
		i += size
	}
	return false
}
