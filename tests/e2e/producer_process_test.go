package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/tests/internal/checker"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// producerProcess is one pulsar-client-go producer in a cmd/e2e-producer process run with
// -interactive: created once, it sends as many messages as the test asks for, when it asks, so a
// test can break and repair the broker under one connected producer. It runs as a process of its
// own for the reason cmd/e2e-producer gives: pulsar-client-go v0.19.0 races with itself when a
// producer with sends in flight is disconnected, which a fenced topic does. It is used from the
// test's goroutine only.
type producerProcess struct {
	t         *testing.T
	chk       *checker.Checker
	name      string
	size      int
	batchWait time.Duration // bound on one batch: the send timeout and a margin
	next      int64         // the next message's sequence number

	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *json.Decoder
	stderr bytes.Buffer // read only after cmd.Wait
	exited bool
}

// producerOutcome is one line of cmd/e2e-producer's output.
type producerOutcome struct {
	Seq   int64  `json:"seq"`
	ID    string `json:"id"`
	Err   string `json:"err"`
	Done  bool   `json:"done"`
	Ready bool   `json:"ready"`
	Batch bool   `json:"batch"`
}

// startProducerProcess starts producer name (also its checker producer) on topic at url, with
// payloads of size bytes and the given send timeout, and waits until its producer exists. The
// process is ended in t.Cleanup.
func startProducerProcess(t *testing.T, chk *checker.Checker, url, topic, name string, size int, sendTimeout time.Duration) *producerProcess {
	t.Helper()
	p := &producerProcess{t: t, chk: chk, name: name, size: size, batchWait: sendTimeout + 30*time.Second}
	p.cmd = exec.Command(harness.ToolBinary(t, "e2e-producer"), "-interactive", "-url", url, "-topic", topic,
		"-name", name, "-size", strconv.Itoa(size), "-send-timeout", sendTimeout.String())
	p.cmd.Stderr = &p.stderr
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.out = json.NewDecoder(stdout)
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start e2e-producer: %v", err)
	}
	t.Cleanup(p.Close)
	var first producerOutcome
	if err := p.decode(&first, 60*time.Second); err != nil || !first.Ready {
		p.fail("producer %s not created: %v (%+v)", name, err, first)
	}
	return p
}

// Send sends the next n messages, records each in the checker (sent, then acked or failed) and
// returns how many failed and the first error.
func (p *producerProcess) Send(n int) (failed int, firstErr error) {
	p.t.Helper()
	for seq := p.next; seq < p.next+int64(n); seq++ {
		p.chk.Sent(p.name, seq, p.size)
	}
	p.next += int64(n)
	if _, err := fmt.Fprintf(p.stdin, "%d\n", n); err != nil {
		p.fail("ask for %d messages: %v", n, err)
	}
	for {
		var o producerOutcome
		if err := p.decode(&o, p.batchWait); err != nil {
			p.fail("batch of %d messages: %v", n, err)
		}
		switch {
		case o.Batch:
			return failed, firstErr
		case o.Err != "":
			failed++
			if firstErr == nil {
				firstErr = errors.New(o.Err)
			}
			p.chk.Failed(p.name, o.Seq, errors.New(o.Err))
		case o.ID != "":
			p.chk.Acked(p.name, o.Seq, o.ID)
		default:
			p.fail("unexpected output %+v", o)
		}
	}
}

// decode reads the next output line; a process that says nothing for wait is killed.
func (p *producerProcess) decode(o *producerOutcome, wait time.Duration) error {
	timer := time.AfterFunc(wait, func() { _ = p.cmd.Process.Kill() })
	defer timer.Stop()
	if err := p.out.Decode(o); err != nil {
		return fmt.Errorf("reading its output (nothing within %v, or it exited): %w", wait, err)
	}
	return nil
}

// fail ends the process and fails the test with its stderr.
func (p *producerProcess) fail(format string, args ...any) {
	p.t.Helper()
	_ = p.cmd.Process.Kill()
	p.wait()
	p.t.Fatalf("e2e-producer %s: %s; stderr:\n%s", p.name, fmt.Sprintf(format, args...), tail(p.stderr.String(), 40))
}

// Close ends the run (end of stdin: the producer closes) and fails the test if the process does not
// finish cleanly within a minute.
func (p *producerProcess) Close() {
	if p.exited {
		return
	}
	_ = p.stdin.Close()
	var o producerOutcome
	err := p.decode(&o, time.Minute)
	p.wait()
	if err != nil || !o.Done || p.cmd.ProcessState.ExitCode() != 0 {
		p.t.Errorf("e2e-producer %s did not finish cleanly (%v, last output %+v, %v); stderr:\n%s", p.name, err, o, p.cmd.ProcessState, tail(p.stderr.String(), 40))
	}
}

func (p *producerProcess) wait() {
	if !p.exited {
		_ = p.cmd.Wait()
		p.exited = true
	}
}
