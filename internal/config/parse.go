// Package config reads the settings of `meridian standalone` from a configuration file in Apache
// Pulsar's format (broker.conf / standalone.conf), from environment variables and from command-line
// flags, into one Settings value. It knows every key Meridian supports, under Pulsar's name where
// Pulsar has one and under the flag's name otherwise (keys.go), and nothing about how the broker
// acts on them: internal/node does that.
//
// Sources, lowest precedence first (docs/operations.md, "Configuration file"):
//
//  1. built-in defaults;
//  2. the file given with --config (Pulsar's and Meridian's key names);
//  3. PULSAR_PREFIX_<key>=value environment variables, as Pulsar's container images apply them on
//     top of the file;
//  4. MERIDIAN_STANDALONE_<FLAG>=value environment variables (MERIDIAN_STANDALONE_DATA_DIR for
//     --data-dir);
//  5. command-line flags.
//
// The package is a leaf: it imports only the standard library.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxFileBytes bounds a configuration file. Pulsar's own broker.conf, every key documented, is
// about 90 KB.
const MaxFileBytes = 1 << 20

// Entry is one key=value line of a configuration file.
type Entry struct {
	Key   string
	Value string
	Line  int // 1-based
}

// ParseError names the line a configuration file cannot be read at.
type ParseError struct {
	Line int // 0 for errors about the whole file
	Msg  string
}

func (e *ParseError) Error() string {
	if e.Line == 0 {
		return e.Msg
	}
	return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
}

// Parse reads a configuration file in Pulsar's format: one key=value per line; lines whose first
// non-blank character is '#' or '!' are comments; blank lines are skipped. The key ends at the first
// '=' (so values may contain '='); whitespace around key and value is trimmed (so "\r\n" line ends
// work). Backslashes are taken literally, with one exception: a line ending in a backslash (a Java
// properties line continuation) is refused rather than misread, as are keys with whitespace or
// control characters and lines without '='. Entries come back in file order; a key may repeat (the
// caller decides: the last one wins in Apply).
func Parse(r io.Reader) ([]Entry, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
	if err != nil {
		return nil, &ParseError{Msg: fmt.Sprintf("read: %v", err)}
	}
	if len(data) > MaxFileBytes {
		return nil, &ParseError{Msg: fmt.Sprintf("larger than %d bytes", MaxFileBytes)}
	}
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // a UTF-8 byte order mark
	var entries []Entry
	for i, raw := range strings.Split(string(data), "\n") {
		line := strings.TrimSpace(raw)
		if line == "" || line[0] == '#' || line[0] == '!' {
			continue
		}
		e, err := parseLine(line)
		if err != nil {
			return nil, &ParseError{Line: i + 1, Msg: err.Error()}
		}
		e.Line = i + 1
		entries = append(entries, e)
	}
	return entries, nil
}

func parseLine(line string) (Entry, error) {
	key, value, ok := strings.Cut(line, "=")
	if !ok {
		return Entry{}, fmt.Errorf("%q is not key=value", clip(line))
	}
	key, value = strings.TrimSpace(key), strings.TrimSpace(value)
	if err := checkKey(key); err != nil {
		return Entry{}, err
	}
	if strings.HasSuffix(value, `\`) {
		return Entry{}, fmt.Errorf("%s: the value ends with a backslash; line continuations are not supported", key)
	}
	if !utf8.ValidString(value) {
		return Entry{}, fmt.Errorf("%s: the value is not valid UTF-8", key)
	}
	return Entry{Key: key, Value: value}, nil
}

// checkKey accepts what Pulsar's and Meridian's key names are made of: letters, digits and ._-
func checkKey(key string) error {
	if key == "" {
		return errors.New("a line starts with '=': the key is missing")
	}
	for _, r := range key {
		if r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '.' || r == '_' || r == '-') {
			continue
		}
		return fmt.Errorf("key %q: only letters, digits and . _ - may form a key", clip(key))
	}
	return nil
}

// clip shortens text quoted in an error.
func clip(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
