package main

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// printable returns s safe to write to a terminal on one line: control
// characters (C0, DEL, C1, so escape sequences, bells, carriage returns,
// tabs and newlines), other non-printing runes (bidirectional overrides,
// zero-width and format characters) and invalid UTF-8 are shown escaped,
// Go style: \x1b, \r, \n, \u202e. Text, in any script, is left as it is.
// Run records (errors, progress messages, names, args) hold what handlers
// and users put there: the CLI prints them only through printable or
// printableLines.
func printable(s string) string { return escapeText(s, false) }

// printableLines is printable keeping line breaks, for a field printed
// on several lines on purpose (an error with its stack).
func printableLines(s string) string { return escapeText(s, true) }

func escapeText(s string, keepNewlines bool) string {
	clean := true
	for _, r := range s {
		if keep := printableRune(r) || keepNewlines && r == '\n'; !keep {
			clean = false
			break
		}
	}
	if clean {
		return s // also free of invalid UTF-8, which ranges as RuneError
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case printableRune(r), keepNewlines && r == '\n':
			b.WriteRune(r)
		default:
			b.WriteString(escapeRune(r))
		}
		i += size
	}
	return b.String()
}

// printableRune: a graphic rune (letters, marks, numbers, punctuation,
// symbols, spaces) other than the replacement character, which stands
// for invalid UTF-8 when ranging.
func printableRune(r rune) bool {
	return r != utf8.RuneError && unicode.IsGraphic(r)
}

func escapeRune(r rune) string {
	switch r {
	case '\a':
		return `\a`
	case '\b':
		return `\b`
	case '\f':
		return `\f`
	case '\n':
		return `\n`
	case '\r':
		return `\r`
	case '\t':
		return `\t`
	case '\v':
		return `\v`
	case utf8.RuneError:
		return `\ufffd`
	}
	switch {
	case r < 0x100:
		return fmt.Sprintf(`\x%02x`, r)
	case r < 0x10000:
		return fmt.Sprintf(`\u%04x`, r)
	}
	return fmt.Sprintf(`\U%08x`, r)
}
