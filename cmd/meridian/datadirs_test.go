package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/poll"
)

func bindForTest(t *testing.T, dir, cluster string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	raw := fmt.Sprintf(`{"format":1,"cluster":%q,"createdAt":"2026-01-01T00:00:00Z"}`, cluster)
	if err := os.WriteFile(filepath.Join(dir, "cluster.json"), []byte(raw), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestClustersModeDefaultDataDirIsBesideStandalones(t *testing.T) {
	opts, err := parseStandalone(t, "--clusters", "a,b")
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"data-clusters/a", "data-clusters/b"} {
		if opts[i].DataDir != want {
			t.Errorf("cluster %s: data dir %q, want %q", opts[i].Cluster, opts[i].DataDir, want)
		}
	}
	if opts, _ := parseStandalone(t); opts[0].DataDir != "./data" {
		t.Errorf("standalone data dir %q", opts[0].DataDir)
	}
}

func TestDataDirOfTheOtherModeIsRefused(t *testing.T) {
	standalone := t.TempDir()
	bindForTest(t, standalone, "standalone")
	if err := checkDataDirLayout(standalone, true); err == nil || !strings.Contains(err.Error(), `cluster "standalone"`) {
		t.Errorf("--clusters on a standalone data dir: %v", err)
	}
	if err := checkDataDirLayout(standalone, false); err != nil {
		t.Errorf("standalone on its own data dir: %v", err)
	}

	clusters := t.TempDir()
	bindForTest(t, filepath.Join(clusters, "a"), "a")
	bindForTest(t, filepath.Join(clusters, "b"), "b")
	if err := checkDataDirLayout(clusters, false); err == nil || !strings.Contains(err.Error(), "clusters a, b") {
		t.Errorf("standalone on a --clusters data dir: %v", err)
	}
	if err := checkDataDirLayout(clusters, true); err != nil {
		t.Errorf("--clusters on its own data dir: %v", err)
	}
	for _, fresh := range []string{t.TempDir(), filepath.Join(t.TempDir(), "missing")} {
		for _, mode := range []bool{false, true} {
			if err := checkDataDirLayout(fresh, mode); err != nil {
				t.Errorf("fresh dir %s (clusters mode %v): %v", fresh, mode, err)
			}
		}
	}
}

// TestClustersDataLeftAtTheOldDefaultIsNotIgnored: clusters whose data dirs sit in ./data (where
// --clusters kept them by default before) do not start empty in ./data-clusters without a word.
func TestClustersDataLeftAtTheOldDefaultIsNotIgnored(t *testing.T) {
	t.Chdir(t.TempDir())
	bindForTest(t, filepath.Join("data", "a"), "a")
	if err := checkDataDirs([]string{"a", "b"}, defaultClustersDataDir, false); err == nil || !strings.Contains(err.Error(), "--data-dir ./data") {
		t.Errorf("old default layout: %v", err)
	}
	if err := checkDataDirs([]string{"a", "b"}, "./data", true); err != nil {
		t.Errorf("old layout named explicitly: %v", err)
	}
}

// TestProcessReadmeCommandsOneAfterTheOther runs the README's two commands in one working dir with
// their default data dirs: `meridian standalone`, then `meridian standalone --clusters a,b`. Nothing
// nests; --clusters refuses the standalone data dir when pointed at it; each cluster logs its own
// shutdown.
func TestProcessReadmeCommandsOneAfterTheOther(t *testing.T) {
	wd := t.TempDir()
	run := func(args ...string) *process {
		t.Helper()
		p := &process{out: &syncBuffer{}, exited: make(chan struct{})}
		p.cmd = exec.Command(meridianBinary(t), append([]string{"standalone"}, args...)...)
		p.cmd.Dir = wd
		p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			p.err = p.cmd.Wait()
			close(p.exited)
		}()
		t.Cleanup(func() {
			select {
			case <-p.exited:
			default:
				_ = p.cmd.Process.Kill()
				<-p.exited
			}
			if t.Failed() {
				t.Logf("meridian %s output:\n%s", strings.Join(args, " "), p.out.String())
			}
		})
		return p
	}
	stop := func(p *process) {
		t.Helper()
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := p.wait(t, 30*time.Second); err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, p.out.String())
		}
	}

	web := freePort(t)
	p := run("--broker-addr", freePort(t), "--web-addr", web)
	p.waitReady(t, web)
	stop(p)

	brokerBase, webBase := freeBasePort(t), freeBasePort(t)
	addrs := []string{"--broker-addr", fmt.Sprintf("127.0.0.1:%d", brokerBase), "--web-addr", fmt.Sprintf("127.0.0.1:%d", webBase)}
	q := run(append([]string{"--clusters", "a,b", "--data-dir", "./data"}, addrs...)...)
	if err := q.wait(t, 30*time.Second); err == nil || !strings.Contains(q.out.String(), "a `meridian standalone` data dir") {
		t.Fatalf("--clusters on the standalone data dir: exit %v\n%s", err, q.out.String())
	}

	q = run(append([]string{"--clusters", "a,b"}, addrs...)...)
	q.waitReady(t, fmt.Sprintf("127.0.0.1:%d", webBase))
	q.waitReady(t, fmt.Sprintf("127.0.0.1:%d", webBase+10))
	// Each cluster answers ready before the process has configured replication between them; a
	// stop before that ends it early, without the process's own shutdown line. The process says
	// when it is ready as a whole.
	poll.Until(t, 30*time.Second, "the process's ready line", func() bool {
		return strings.Contains(q.out.String(), `msg="meridian clusters ready"`)
	})
	stop(q)
	for _, c := range []string{"a", "b"} {
		if _, err := os.Stat(filepath.Join(wd, "data", c)); err == nil {
			t.Errorf("data/%s nested in the standalone data dir", c)
		}
		if _, err := os.Stat(filepath.Join(wd, "data-clusters", c, "cluster.json")); err != nil {
			t.Errorf("data-clusters/%s: %v", c, err)
		}
	}
	out := q.out.String()
	for _, c := range []string{"a", "b"} {
		if !strings.Contains(out, `msg="shutting down" cluster=`+c+" ") {
			t.Errorf("no shutdown line of cluster %s:\n%s", c, out)
		}
	}
	if !strings.Contains(out, `msg="shutting down" clusters=a,b `) {
		t.Errorf("no process shutdown line:\n%s", out)
	}
}
