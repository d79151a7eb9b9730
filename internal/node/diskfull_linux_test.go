//go:build linux

package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/client"
	"github.com/meridian-mq/meridian/internal/poll"
)

// diskFullDirEnv carries the data directory to the re-executed test binary that runs
// TestDiskFullFailsClosedAndRecovers in a private mount namespace.
const diskFullDirEnv = "MERIDIAN_DISKFULL_DATADIR"

// diskFullTmpfsBytes is the size of the file system the storage engine gets: room for a few 1 MiB
// journal files and the segments, so that a ballast file fills it in a moment.
const diskFullTmpfsBytes = 24 << 20

// TestDiskFullFailsClosedAndRecovers runs a node whose storage directory is a size-limited tmpfs
// (mounted in a private mount namespace: the test binary runs itself again, unshared, as root) and
// fills that file system: publishes get send errors (never a receipt for data that is not saved),
// readiness answers 503 with the reason and the metrics say so; then it frees the space: readiness,
// publishes and checkpoints come back without a restart; and after a restart every message that was
// acknowledged reads back.
//
// It needs root (to mount). Without root it is skipped, except with CI=true, where it fails.
func TestDiskFullFailsClosedAndRecovers(t *testing.T) {
	if dir := os.Getenv(diskFullDirEnv); dir != "" {
		runDiskFull(t, dir)
		return
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("mounting a size-limited tmpfs needs root; with CI=true this test must run")
		}
		t.Skip("mounting a size-limited tmpfs needs root")
	}
	dataDir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDiskFullFailsClosedAndRecovers$", "-test.v", "-test.count=1",
		"-test.short="+strconv.FormatBool(testing.Short()), "-test.timeout=5m")
	cmd.Env = append(os.Environ(), diskFullDirEnv+"="+dataDir)
	// A mount namespace of its own (Go also makes its mounts private, as unshare(1) does): the tmpfs
	// is seen by the child only and goes away with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestDiskFullFailsClosedAndRecovers") {
		t.Fatalf("the test in its mount namespace: %v\n%s", err, out)
	}
	if testing.Verbose() {
		t.Logf("in its mount namespace:\n%s", out)
	}
}

func runDiskFull(t *testing.T, dataDir string) {
	storage := storageDir(dataDir)
	if err := os.MkdirAll(storage, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", storage, "tmpfs", 0, fmt.Sprintf("size=%d", diskFullTmpfsBytes)); err != nil {
		t.Fatalf("mount a %d-byte tmpfs on %s: %v", diskFullTmpfsBytes, storage, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(storage, syscall.MNT_DETACH) })

	o := testOptions(t, dataDir)
	o.JournalFileBytes = 1 << 20
	n := startNode(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := client.New(client.Options{ServiceURL: n.ServiceURL(), MaxBackoff: 200 * time.Millisecond, Logger: o.Logger})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const topic = "persistent://public/default/diskfull"
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	acked := map[string]bool{} // payloads with a receipt
	seq := 0
	send := func(timeout time.Duration) error {
		seq++
		payload := fmt.Sprintf("m%06d-%s", seq, strings.Repeat("d", 4000))
		sctx, scancel := context.WithTimeout(ctx, timeout)
		defer scancel()
		_, err := p.Send(sctx, client.ProducerMessage{Payload: []byte(payload)})
		if err == nil {
			acked[payload] = true
		}
		return err
	}
	for range 100 {
		if err := send(10 * time.Second); err != nil {
			t.Fatalf("send before the disk is full: %v", err)
		}
	}
	if code, body := httpGet(t, n.WebURL()+"/admin/v2/brokers/ready"); code != 200 {
		t.Fatalf("ready before the disk is full: %d %s", code, body)
	}
	checkpointsBefore := metricValue(t, n, "meridian_storage_checkpoints_total")

	// Fill the file system.
	ballast := filepath.Join(storage, "ballast")
	fillDisk(t, ballast)
	sendErrors := 0
	deadline := time.Now().Add(30 * time.Second)
	for sendErrors == 0 {
		if time.Now().After(deadline) {
			t.Fatal("every send succeeded on a full disk")
		}
		if err := send(2 * time.Second); err != nil {
			sendErrors++
			t.Logf("send on a full disk: %v", err)
		}
	}
	code, body := 0, ""
	waitForCode(t, func() int {
		code, body = httpGet(t, n.WebURL()+"/admin/v2/brokers/ready")
		return code
	}, 503)
	if !strings.Contains(body, "no space left on device") {
		t.Errorf("readiness on a full disk: %d %q, want the reason", code, body)
	}
	t.Logf("readiness on a full disk: %d %s", code, strings.TrimSpace(body))
	if v := metricValue(t, n, "meridian_storage_ready"); v != 0 {
		t.Errorf("meridian_storage_ready = %v on a full disk", v)
	}
	if pending, failing := metricValue(t, n, "meridian_storage_repairs_pending"), metricValue(t, n, "meridian_storage_journal_failing"); pending < 1 && failing < 1 {
		t.Errorf("on a full disk: %v repairs pending, journal failing %v; want one of them", pending, failing)
	}
	// More publishes keep failing, none is acknowledged unless saved (checked after the restart).
	for range 10 {
		if err := send(500 * time.Millisecond); err != nil {
			sendErrors++
		}
	}

	// Free the space: everything comes back without a restart.
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	waitForCode(t, func() int {
		code, _ := httpGet(t, n.WebURL()+"/admin/v2/brokers/ready")
		return code
	}, 200)
	deadline = time.Now().Add(30 * time.Second)
	for send(2*time.Second) != nil {
		if time.Now().After(deadline) {
			t.Fatal("publishes did not come back after the space was freed")
		}
	}
	// Enough to fill a journal file or two: checkpoints run again.
	for range 400 {
		if err := send(10 * time.Second); err != nil {
			t.Fatalf("send after the space was freed: %v", err)
		}
	}
	waitForValue(t, n, "meridian_storage_checkpoints_total", func(v float64) bool { return v > checkpointsBefore })
	waitForCode(t, func() int {
		code, _ := httpGet(t, n.WebURL()+"/admin/v2/brokers/ready")
		return code
	}, 200)
	t.Logf("%d sends failed while the disk was full; %d acknowledged in all", sendErrors, len(acked))

	// Restart: every acknowledged message is there.
	_ = p.Close(ctx)
	_ = c.Close()
	if err := n.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	n2 := startNode(t, o)
	c2, err := client.New(client.Options{ServiceURL: n2.ServiceURL(), Logger: o.Logger})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	cons, err := c2.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "check", InitialPosition: client.PositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close(ctx)
	missing := len(acked)
	for missing > 0 {
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		m, err := cons.Receive(rctx)
		rcancel()
		if err != nil {
			t.Fatalf("after the restart, %d of %d acknowledged messages missing: %v", missing, len(acked), err)
		}
		if acked[string(m.Payload)] {
			acked[string(m.Payload)] = false
			missing--
		}
	}
}

// fillDisk writes path until the file system is full.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill the disk: %v", err)
			}
			return
		}
	}
}

// metricValue is the value of the first sample of a metric on the node's /metrics.
func metricValue(t *testing.T, n *Node, name string) float64 {
	t.Helper()
	fam, ok := scrapeMetrics(t, n)[name]
	if !ok || len(fam.GetMetric()) == 0 {
		t.Fatalf("metric %s not exported", name)
	}
	m := fam.GetMetric()[0]
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	}
	return m.GetUntyped().GetValue()
}

func waitForValue(t *testing.T, n *Node, name string, ok func(float64) bool) {
	t.Helper()
	var v float64
	poll.Until(t, 30*time.Second, name+" to change", func() bool {
		v = metricValue(t, n, name)
		return ok(v)
	})
}
