package transcript

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// counter is the machine of testdata/counter.txt.
func counter(t *testing.T) Driver {
	total := 0
	return func(t *testing.T, c Command) string {
		switch c.Name {
		case "add":
			n, err := strconv.Atoi(c.Args[0])
			if v, ok := c.Value("n"); ok {
				n, err = strconv.Atoi(v)
			}
			if err != nil {
				t.Fatalf("%s: %v", c.Pos, err)
			}
			total += n
			if c.Flag("quiet") {
				return ""
			}
			return fmt.Sprintf("total %d", total)
		case "reset":
			total = 0
			return ""
		}
		t.Fatalf("%s: unknown command %q", c.Pos, c.Name)
		return ""
	}
}

func TestRunDir(t *testing.T) {
	RunDir(t, "testdata", counter)
}

func TestCommand(t *testing.T) {
	c := Command{Name: "plan", Args: []string{"last=1:9", "caught-up", "max=3"}}
	if v, ok := c.Value("max"); !ok || v != "3" {
		t.Fatalf("Value(max) = %q, %v", v, ok)
	}
	if _, ok := c.Value("caught-up"); ok {
		t.Fatal("a plain word has no value")
	}
	if !c.Flag("caught-up") || c.Flag("last") {
		t.Fatal("Flag")
	}
	if p := c.Plain(); len(p) != 1 || p[0] != "caught-up" {
		t.Fatalf("Plain = %v", p)
	}
}

// With -rewrite a transcript is written again with today's outputs, comments and blank lines kept.
func TestRewrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "counter.txt")
	stale := "# keep me\nadd 2\n  total 99\n\nadd 1\n"
	if err := os.WriteFile(path, []byte(stale), 0o644); err != nil {
		t.Fatal(err)
	}
	*rewrite = true
	defer func() { *rewrite = false }()
	Run(t, path, counter(t))
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "# keep me\nadd 2\n  total 2\n\nadd 1\n  total 3\n"; string(got) != want {
		t.Fatalf("rewritten:\n%s\nwant:\n%s", got, want)
	}
}
