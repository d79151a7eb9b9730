//go:build linux

package e2e

import (
	"context"
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
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// diskFullDataDirEnv carries the data directory to the re-executed test binary that runs
// TestDiskFullStandalone in a private mount namespace.
const diskFullDataDirEnv = "MERIDIAN_E2E_DISKFULL_DATADIR"

// diskFullTmpfs is the size of the file system under the broker's storage directory: room for the
// journal files (64 MiB each: the one in use, the one made ahead, two recycled ones) and the
// segments the test writes, small enough that a ballast file fills it in a moment.
const diskFullTmpfs = "512m"

// TestDiskFullStandalone runs a real `meridian standalone` whose storage directory is a
// size-limited tmpfs (mounted in a private mount namespace: the test binary runs itself again,
// unshared, as root, and the broker process inherits the namespace) and fills that file system.
// Publishes fail (never a receipt for data that was not saved), readiness answers 503 with the
// reason, the metrics say so; once the space is freed, readiness, publishes and checkpoints come back
// without a restart; after a restart every acknowledged message reads back.
//
// It needs root (to mount). Without root it is skipped, except with CI=true, where it fails.
func TestDiskFullStandalone(t *testing.T) {
	if dir := os.Getenv(diskFullDataDirEnv); dir != "" {
		runDiskFullStandalone(t, dir)
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
	cmd := exec.Command(os.Args[0], "-test.run=^TestDiskFullStandalone$", "-test.v", "-test.count=1",
		"-test.short="+strconv.FormatBool(testing.Short()), "-test.timeout=8m")
	cmd.Env = append(os.Environ(), diskFullDataDirEnv+"="+dataDir, "MERIDIAN_BIN="+bin)
	// A mount namespace of its own (Go also makes its mounts private, as unshare(1) does): the tmpfs
	// is seen by the child and the broker it starts only, and goes away with them.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestDiskFullStandalone") {
		t.Fatalf("the test in its mount namespace: %v\n%s", err, out)
	}
	if testing.Verbose() {
		t.Logf("in its mount namespace:\n%s", out)
	}
}

func runDiskFullStandalone(t *testing.T, dataDir string) {
	storage := filepath.Join(dataDir, "storage")
	if err := os.MkdirAll(storage, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", storage, "tmpfs", 0, "size="+diskFullTmpfs); err != nil {
		t.Fatalf("mount a %s tmpfs on %s: %v", diskFullTmpfs, storage, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(storage, syscall.MNT_DETACH) })

	p := harness.StartStandalone(t, harness.Options{DataDir: dataDir})
	ctx := testCtx(t, 6*time.Minute)
	client := harness.NewClient(t, p, nil)
	topic := harness.Topic(t)
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, SendTimeout: 3 * time.Second, DisableBatching: true})
	acked := map[string]bool{}
	seq := 0
	send := func(size int) error {
		seq++
		payload := fmt.Sprintf("m%06d-%s", seq, strings.Repeat("d", size))
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := prod.Send(sctx, &pulsar.ProducerMessage{Payload: []byte(payload)})
		if err == nil {
			acked[payload] = true
		}
		return err
	}
	for range 100 {
		if err := send(4000); err != nil {
			t.Fatalf("send before the disk is full: %v", err)
		}
	}
	if code, body := getURL(t, p.WebURL()+"/admin/v2/brokers/ready"); code != http.StatusOK {
		t.Fatalf("ready before the disk is full: %d %s", code, body)
	}

	// Fill the file system.
	ballast := filepath.Join(storage, "ballast")
	fillFileSystem(t, ballast)
	failed := 0
	deadline := time.Now().Add(60 * time.Second)
	for failed == 0 {
		if time.Now().After(deadline) {
			t.Fatal("every send succeeded on a full disk")
		}
		if err := send(4000); err != nil {
			failed++
			t.Logf("send on a full disk: %v", err)
		}
	}
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

	// Free the space: everything comes back without a restart.
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, p.WebURL()+"/admin/v2/brokers/ready", http.StatusOK, nil)
	checkpoints := scrape(t, p.WebURL(), "meridian_storage_checkpoints_total")
	deadline = time.Now().Add(90 * time.Second)
	for send(4000) != nil {
		if time.Now().After(deadline) {
			t.Fatal("publishes did not come back after the space was freed")
		}
	}
	// More than a journal file (64 MiB): a checkpoint runs.
	for range 140 {
		if err := send(512 << 10); err != nil {
			t.Fatalf("send after the space was freed: %v", err)
		}
	}
	deadline = time.Now().Add(60 * time.Second)
	for scrape(t, p.WebURL(), "meridian_storage_checkpoints_total") <= checkpoints {
		if time.Now().After(deadline) {
			t.Fatal("no checkpoint after the space was freed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitStatus(t, p.WebURL()+"/admin/v2/brokers/ready", http.StatusOK, nil)
	t.Logf("%d sends failed while the disk was full; %d acknowledged in all", failed, len(acked))

	// Restart: every acknowledged message is there.
	prod.Close()
	p.Restart()
	reader := newReader(t, client, pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	missing := len(acked)
	for missing > 0 {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		m, err := reader.Next(rctx)
		cancel()
		if err != nil {
			t.Fatalf("after the restart, %d of %d acknowledged messages missing: %v", missing, len(acked), err)
		}
		if acked[string(m.Payload())] {
			acked[string(m.Payload())] = false
			missing--
		}
	}
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
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, b := getURL(t, url)
		if body != nil {
			*body = b
		}
		if code == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %d %q, want %d", url, code, b, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
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
