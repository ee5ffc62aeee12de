package logsafe

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"ns", "ns"},
		{"team a/locks-1 é", "team a/locks-1 é"},
		{"a\nb", `a\nb`},
		{"a\r\nb\tc", `a\r\nb\tc`},
		{"\x1b[31mred", `\x1b[31mred`},
		{"evil\u202eLTR", `evil\u202eLTR`},
		{"bad\xffutf8", `bad\xffutf8`},
		{`back\slash`, `back\\slash`},
		{`quote"d`, `quote"d`},
		{strings.Repeat("x", Max), strings.Repeat("x", Max)},
		{strings.Repeat("x", Max+1), strings.Repeat("x", Max) + "…(+1 bytes)"},
		{strings.Repeat("x", 1_000_000), strings.Repeat("x", Max) + "…(+999872 bytes)"},
		{strings.Repeat("\n", 1000), strings.Repeat(`\n`, Max) + "…(+872 bytes)"},
		// Cut at a character boundary: é is two bytes.
		{strings.Repeat("x", Max-1) + "éé", strings.Repeat("x", Max-1) + "…(+4 bytes)"},
	} {
		if got := String(tc.in); got != tc.want {
			t.Errorf("String(%.40q) = %.80q, want %.80q", tc.in, got, tc.want)
		}
	}
}

// Whatever the input, the result is one line of valid UTF-8, printable,
// of bounded length.
func TestStringBounds(t *testing.T) {
	inputs := []string{strings.Repeat("\xff", 10000), strings.Repeat("\U0010ffff", 5000), strings.Repeat("\u2028", 5000), strings.Repeat("é", 5000) + "\xff"}
	for _, in := range inputs {
		out := String(in)
		if len(out) > 4*Max+32 {
			t.Errorf("String of %d bytes is %d bytes", len(in), len(out))
		}
		if !utf8.ValidString(out) || strings.ContainsAny(out, "\n\r\u2028\u2029") {
			t.Errorf("String(%.20q) = %.60q: not one line of UTF-8", in, out)
		}
	}
	if got := Strings([]string{"a\n", "b"}); len(got) != 2 || got[0] != `a\n` || got[1] != "b" {
		t.Errorf("Strings: %q", got)
	}
}

func FuzzString(f *testing.F) {
	f.Add("ns\nforged")
	f.Add(strings.Repeat("é", 100))
	f.Fuzz(func(t *testing.T, s string) {
		out := String(s)
		if !utf8.ValidString(out) || strings.ContainsAny(out, "\n\r") || len(out) > 4*Max+32 {
			t.Fatalf("String(%q) = %q", s, out)
		}
		if len(s) <= Max && !needsEscape(s) && out != s {
			t.Fatalf("String(%q) = %q: changed a short printable string", s, out)
		}
	})
}

func TestClip(t *testing.T) {
	if got := Clip("a\nb", 10); got != "a\nb" {
		t.Errorf("Clip escaped: %q", got)
	}
	if got, want := Clip(strings.Repeat("y", 300), Max), strings.Repeat("y", Max)+"…(+172 bytes)"; got != want {
		t.Errorf("Clip = %q, want %q", got, want)
	}
}
