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
	"flag"
	"fmt"
	"os"
	"path/filepath"
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
