//go:build linux

package e2e

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/meridian-mq/meridian/tests/internal/checker"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// diskFullDataDirEnv carries the data directory to the test binary re-executed in a private mount
// namespace (withSmallDisk): set, it means "this is the re-executed binary: mount and run".
const diskFullDataDirEnv = "MERIDIAN_E2E_DISKFULL_DATADIR"

// diskFullTmpfs is the size of the file system under the broker's storage directory: room for the
// journal files (64 MiB each: the one in use, the one made ahead, two recycled ones) and the
// segments the test writes, small enough that a ballast file fills it in a moment.
const diskFullTmpfs = "512m"

// TestDiskFullStandalone runs a real `meridian standalone` whose storage directory is a
// size-limited tmpfs (mounted in a private mount namespace: the test binary runs itself again,
// unshared, as root, and the broker process inherits the namespace) and fills that file system.
// Publishes fail (never a receipt for data that was not saved), readiness answers 503 with the
// reason, the metrics say so; once the space is freed, readiness, publishes (from the producer that
// stayed connected through the fault) and checkpoints come back without a restart; after a restart
// every acknowledged message reads back intact.
//
// It needs root (to mount). Without root it is skipped, except with CI=true, where it fails.
func TestDiskFullStandalone(t *testing.T) {
	withSmallDisk(t, runDiskFullStandalone)
}

// withSmallDisk runs run(t, dataDir) in a copy of the test binary started again in a mount
// namespace of its own, where dataDir/storage is a diskFullTmpfs tmpfs: a broker started there
// with --data-dir dataDir keeps its storage on a file system the test can fill. The tmpfs is seen
// by that copy and the processes it starts only, and goes away with them. The test calling it must
// be a top-level test (the copy runs ^t.Name()$ alone).
//
// Mounting needs root. Without root the test is skipped, except with CI=true, where it fails.
func withSmallDisk(t *testing.T, run func(t *testing.T, dataDir string)) {
	t.Helper()
	if dir := os.Getenv(diskFullDataDirEnv); dir != "" {
		mountSmallDisk(t, filepath.Join(dir, "storage"))
		run(t, dir)
		return
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("mounting a size-limited tmpfs needs root; with CI=true this test must run")
		}
		t.Skip("mounting a size-limited tmpfs needs root")
	}
	bin := harness.MeridianBinary(t) // built once, here: the re-executed binary uses it
	dataDir := filepath.Join(t.TempDir(), "data")
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1",
		"-test.short="+strconv.FormatBool(testing.Short()), "-test.timeout=8m")
	cmd.Env = append(os.Environ(), diskFullDataDirEnv+"="+dataDir, "MERIDIAN_BIN="+bin)
	// A mount namespace of its own (Go also makes its mounts private, as unshare(1) does).
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("the test in its mount namespace: %v\n%s", err, out)
	}
	if testing.Verbose() {
		t.Logf("in its mount namespace:\n%s", out)
	}
}

// mountSmallDisk mounts a diskFullTmpfs tmpfs on dir (created if missing) until the test ends.
func mountSmallDisk(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+diskFullTmpfs); err != nil {
		t.Fatalf("mount a %s tmpfs on %s: %v", diskFullTmpfs, dir, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
}

func runDiskFullStandalone(t *testing.T, dataDir string) {
	storage := filepath.Join(dataDir, "storage")
	p := harness.StartStandalone(t, harness.Options{DataDir: dataDir})
	topic := harness.Topic(t)
	chk := checker.New()
	// The producer lives through the fault in a process of its own (producerProcess).
	prod := startProducerProcess(t, chk, p.ServiceURL(), topic, "small", 4000, 3*time.Second)
	if failed, err := prod.Send(100); failed > 0 {
		t.Fatalf("%d sends failed before the disk was full, first: %v", failed, err)
	}
	if code, body := getURL(t, p.WebURL()+"/admin/v2/brokers/ready"); code != http.StatusOK {
		t.Fatalf("ready before the disk is full: %d %s", code, body)
	}

	// Fill the file system.
	ballast := filepath.Join(storage, "ballast")
	fillFileSystem(t, ballast)
	failed := 0
	harness.Eventually(t, 60*time.Second, "a send error on a full disk", func() error {
		if _, err := prod.Send(1); err != nil {
			failed++
			t.Logf("send on a full disk: %v", err)
			return nil
		}
		return errors.New("the send was acknowledged")
	})
	var body string
	waitStatus(t, p.WebURL()+"/admin/v2/brokers/ready", http.StatusServiceUnavailable, &body)
	if !strings.Contains(body, "no space left on device") {
		t.Errorf("readiness on a full disk: %q, want the reason", body)
	}
	t.Logf("readiness on a full disk: %s", strings.TrimSpace(body))
	if v := scrape(t, p.WebURL(), "meridian_storage_ready"); v != 0 {
		t.Errorf("meridian_storage_ready = %v on a full disk", v)
	}
	if pending, failing := scrape(t, p.WebURL(), "meridian_storage_repairs_pending"), scrape(t, p.WebURL(), "meridian_storage_journal_failing"); pending < 1 && failing < 1 {
		t.Errorf("on a full disk: %v repairs pending, journal failing %v; want one of them", pending, failing)
	}

	// Free the space: everything comes back without a restart, the producer included.
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, p.WebURL()+"/admin/v2/brokers/ready", http.StatusOK, nil)
	checkpoints := scrape(t, p.WebURL(), "meridian_storage_checkpoints_total")
	harness.Eventually(t, 90*time.Second, "publishes back after the space was freed", func() error {
		if _, err := prod.Send(1); err != nil {
			failed++
			return err
		}
		return nil
	})
	// More than a journal file (64 MiB): a checkpoint runs.
	big := startProducerProcess(t, chk, p.ServiceURL(), topic, "big", 512<<10, 30*time.Second)
	for range 7 {
		if n, err := big.Send(20); n > 0 {
			t.Fatalf("%d sends failed after the space was freed, first: %v", n, err)
		}
	}
	harness.Eventually(t, 60*time.Second, "a checkpoint after the space was freed", func() error {
		if n := scrape(t, p.WebURL(), "meridian_storage_checkpoints_total"); n <= checkpoints {
			return fmt.Errorf("meridian_storage_checkpoints_total %v", n)
		}
		return nil
	})
	waitStatus(t, p.WebURL()+"/admin/v2/brokers/ready", http.StatusOK, nil)
	acked, _, _ := chk.Counts()
	t.Logf("%d sends failed while the disk was full or recovering; %d acknowledged in all", failed, acked)

	// Restart: every acknowledged message is there, intact. (A send that failed may be stored, and
	// without deduplication a resend after a lost receipt may be stored twice: that is the
	// producer's at-least-once, not this test's subject.)
	prod.Close()
	big.Close()
	p.Restart()
	reader := newReader(t, harness.NewClient(t, p, nil), pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	everyAcked := checker.Expect{AllowDuplicates: true, NoOrder: true}
	readUntil(t, chk, "after restart", reader, everyAcked, 60*time.Second)
	verify(t, chk, "after restart", everyAcked)
}

// fillFileSystem writes path until its file system is full.
func fillFileSystem(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill the file system: %v", err)
			}
			return
		}
	}
}

func getURL(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitStatus polls url until it answers want (with a deadline); body gets the last answer's body.
func waitStatus(t *testing.T, url string, want int, body *string) {
	t.Helper()
	harness.Eventually(t, 60*time.Second, fmt.Sprintf("GET %s answering %d", url, want), func() error {
		code, b := getURL(t, url)
		if body != nil {
			*body = b
		}
		if code != want {
			return fmt.Errorf("%d %q", code, b)
		}
		return nil
	})
}

// scrape is the value of the first sample of a metric on /metrics.
func scrape(t *testing.T, webURL, name string) float64 {
	t.Helper()
	_, body := getURL(t, webURL+"/metrics")
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, name+" ") || strings.HasPrefix(line, name+"{") {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatalf("metric %q: %v", line, err)
			}
			return v
		}
	}
	t.Fatalf("metric %s not exported", name)
	return 0
}
