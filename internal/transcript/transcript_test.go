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

func TestEntries(t *testing.T) {
	l, ids, attrs, err := Entries("1:3..1:5/msgs=10/marker")
	if err != nil || l != 1 || len(ids) != 3 || ids[0] != 3 || ids[2] != 5 ||
		len(attrs) != 2 || attrs[0] != (Attr{"msgs", "10"}) || attrs[1] != (Attr{Key: "marker"}) {
		t.Fatalf("Entries = %d %v %v %v", l, ids, attrs, err)
	}
	if l, ids, attrs, err := Entries("7:-1"); err != nil || l != 7 || len(ids) != 1 || ids[0] != -1 || attrs != nil {
		t.Fatalf("Entries(7:-1) = %d %v %v %v", l, ids, attrs, err)
	}
	for _, bad := range []string{"1:5..1:3", "1:0..2:0", "x", "1:", "1:0..", "a:b"} {
		if _, _, _, err := Entries(bad); err == nil {
			t.Errorf("Entries(%q) accepted", bad)
		}
	}
}
