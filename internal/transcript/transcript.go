// Package transcript runs transcript tests: the specification of a deterministic state machine
// written as the inputs it is given, one command a line, each followed by the output it must answer
// with, indented by two spaces. A test supplies the driver that applies one command to the machine
// and describes what the machine did; the file is the table of (event, expected actions) steps.
//
//	# Shared: round robin among the consumers with permits.
//	add a
//	flow a 2
//	plan last=1:9
//	  read 1:0.. max 2
//
// Blank lines and lines starting with '#' are kept as they are. `go test -run X -rewrite` writes
// each file again with the outputs the machine gives today, for writing a new transcript or
// reviewing a change of behaviour with git diff. It is imported by tests only (it imports testing,
// as net/http/httptest does).
package transcript

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "write transcript files again with the outputs the machine gives now")

// Command is one input line of a transcript.
type Command struct {
	Name string   // the first word
	Args []string // the other words
	Pos  string   // file:line, for error messages
}

// Flag reports whether the word name is among c's arguments.
func (c Command) Flag(name string) bool {
	for _, a := range c.Args {
		if a == name {
			return true
		}
	}
	return false
}

// Value returns the value of the argument key=value, and whether there is one.
func (c Command) Value(key string) (string, bool) {
	for _, a := range c.Args {
		if k, v, ok := strings.Cut(a, "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// Plain returns the arguments that are not key=value.
func (c Command) Plain() []string {
	var out []string
	for _, a := range c.Args {
		if !strings.Contains(a, "=") {
			out = append(out, a)
		}
	}
	return out
}

// Driver applies one command to the machine under test and returns what the machine did, one line
// per action ("" for nothing). It fails t for a command it does not understand.
type Driver func(t *testing.T, c Command) string

// RunDir runs every file matching dir/*.txt as a subtest named after the file, each with a fresh
// driver from newDriver.
func RunDir(t *testing.T, dir string, newDriver func(t *testing.T) Driver) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts in %s (%v)", dir, err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { Run(t, f, newDriver(t)) })
	}
}

// Run replays the transcript in path against do and reports every command whose output differs
// from the expected one (with -rewrite it writes the file again instead).
func Run(t *testing.T, path string, do Driver) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	var out strings.Builder
	for i := 0; i < len(lines); {
		line := lines[i]
		i++
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			out.WriteString(line + "\n")
			continue
		}
		if strings.HasPrefix(line, " ") {
			t.Fatalf("%s:%d: output without a command: %q", path, i, line)
		}
		var want []string
		for i < len(lines) && strings.HasPrefix(lines[i], "  ") {
			want = append(want, strings.TrimPrefix(lines[i], "  "))
			i++
		}
		words := strings.Fields(line)
		c := Command{Name: words[0], Args: words[1:], Pos: fmt.Sprintf("%s:%d", path, i-len(want))}
		got := strings.TrimRight(do(t, c), "\n")
		out.WriteString(line + "\n")
		if got != "" {
			for _, g := range strings.Split(got, "\n") {
				out.WriteString("  " + g + "\n")
			}
		}
		if w := strings.Join(want, "\n"); got != w && !*rewrite {
			t.Errorf("%s: %s\n got:\n%s\nwant:\n%s", c.Pos, line, indent(got), indent(w))
		}
	}
	if *rewrite {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func indent(s string) string {
	if s == "" {
		return "  (nothing)"
	}
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

// Attr is one attribute of an Entries word: "msgs=10" (Key msgs, Value 10) or "marker" (no value).
type Attr struct{ Key, Value string }

// Entries reads a word that names log entries the way transcripts write them: a position "L:E" or a
// range "L:E..L:E" within one ledger, followed by attributes after slashes ("1:0..1:9/msgs=10",
// "7:1/from=c"). It returns the ledger, the entry ids in order and the attributes.
func Entries(w string) (ledger int64, ids []int64, attrs []Attr, err error) {
	spec, rest, _ := strings.Cut(w, "/")
	from, to := spec, spec
	if a, b, ok := strings.Cut(spec, ".."); ok {
		from, to = a, b
	}
	l1, first, err1 := Position(from)
	l2, last, err2 := Position(to)
	if err := errors.Join(err1, err2); err != nil {
		return 0, nil, nil, err
	}
	if l1 != l2 || first > last {
		return 0, nil, nil, fmt.Errorf("range %q: not within one ledger, in order", spec)
	}
	for e := first; e <= last; e++ {
		ids = append(ids, e)
	}
	if rest != "" {
		for _, a := range strings.Split(rest, "/") {
			k, v, _ := strings.Cut(a, "=")
			attrs = append(attrs, Attr{Key: k, Value: v})
		}
	}
	return l1, ids, attrs, nil
}

// Position parses a position "L:E" (ledger and entry id).
func Position(s string) (ledger, entry int64, err error) {
	l, e, ok := strings.Cut(s, ":")
	if ok {
		ledger, err = strconv.ParseInt(l, 10, 64)
		if err == nil {
			entry, err = strconv.ParseInt(e, 10, 64)
		}
	}
	if !ok || err != nil {
		return 0, 0, fmt.Errorf("position %q: want ledger:entry", s)
	}
	return ledger, entry, nil
}
