package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestVersionCommandReportsTheBuild builds the binary with VCS stamping on (the environment may
// turn it off) and checks `meridian version` against the toolchain and, where the checkout lets Go
// stamp it, the commit git reports.
func TestVersionCommandReportsTheBuild(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "meridian")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=auto")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("meridian version: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{"meridian ", "module   github.com/meridian-mq/meridian\n", "go       " + runtime.Version() + "\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("meridian version lacks %q:\n%s", want, text)
		}
	}
	head, gitErr := exec.Command("git", "rev-parse", "HEAD").Output()
	switch {
	case strings.Contains(text, "commit   "):
		if gitErr != nil || !strings.Contains(text, "commit   "+strings.TrimSpace(string(head))) {
			t.Errorf("commit line does not name HEAD %s (git: %v):\n%s", head, gitErr, text)
		}
	default:
		// A git worktree (.git is a file) or a tree without git: the toolchain records no commit.
		t.Logf("no VCS information stamped here:\n%s", text)
	}
}
