package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildPath string
	buildErr  error

	toolsMu sync.Mutex
	tools   = map[string]string{} // tool name -> built path
)

// RepoRoot returns the directory of the root module (github.com/meridian-mq/meridian), found from
// this source file's location: tests/internal/harness/ lies three levels below it.
func RepoRoot() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("harness: cannot locate own source file")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// MeridianBinary returns the path of a meridian binary built from the working tree. It is built at most
// once per test process (into a temporary directory removed by Cleanup), or taken from $MERIDIAN_BIN.
// A build failure fails the calling test.
func MeridianBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("MERIDIAN_BIN"); p != "" {
		return p
	}
	buildOnce.Do(func() {
		if buildErr = ensureBuildDir(); buildErr != nil {
			return
		}
		buildPath = filepath.Join(buildDir, "meridian")
		args := []string{"build", "-o", buildPath}
		if os.Getenv("MERIDIAN_RACE") == "1" {
			args = append(args, "-race")
		}
		args = append(args, "./cmd/meridian")
		cmd := exec.Command("go", args...)
		cmd.Dir = RepoRoot()
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/meridian: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatalf("harness: %v", buildErr)
	}
	return buildPath
}

// MeridianctlBinary returns the path of a meridianctl binary built from the working tree (at most
// once per test process), for tests that drive a procedure the way an operator or a script would.
func MeridianctlBinary(t testing.TB) string {
	t.Helper()
	toolsMu.Lock()
	defer toolsMu.Unlock()
	const key = "root:meridianctl"
	if p, ok := tools[key]; ok {
		return p
	}
	if err := ensureBuildDir(); err != nil {
		t.Fatalf("harness: %v", err)
	}
	out := filepath.Join(buildDir, "meridianctl")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/meridianctl")
	cmd.Dir = RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("harness: go build ./cmd/meridianctl: %v\n%s", err, b)
	}
	tools[key] = out
	return out
}

// ToolBinary returns the path of ./cmd/<name> of the tests module, built (without -race) at most once
// per test process. Tools run pulsar-client-go code whose own data races must not fail a -race test
// binary (see cmd/e2e-producer).
func ToolBinary(t testing.TB, name string) string {
	t.Helper()
	toolsMu.Lock()
	defer toolsMu.Unlock()
	if p, ok := tools[name]; ok {
		return p
	}
	if err := ensureBuildDir(); err != nil {
		t.Fatalf("harness: %v", err)
	}
	out := filepath.Join(buildDir, name)
	cmd := exec.Command("go", "build", "-o", out, "./cmd/"+name)
	cmd.Dir = filepath.Join(RepoRoot(), "tests")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("harness: go build ./cmd/%s: %v\n%s", name, err, b)
	}
	tools[name] = out
	return out
}

var buildDirOnce sync.Once

func ensureBuildDir() error {
	var err error
	buildDirOnce.Do(func() { buildDir, err = os.MkdirTemp("", "meridian-bin-") })
	if err == nil && buildDir == "" {
		err = fmt.Errorf("no build directory")
	}
	return err
}

// Cleanup removes what the package built for the whole test process (the meridian binary). Call it
// from TestMain after m.Run; Main does.
func Cleanup() {
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
}
