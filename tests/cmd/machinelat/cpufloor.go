package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// The CPU floor of a group commit: the least CPU a Go server spends per round when a client sends
// one batch of `batch` bytes every millisecond (the batching delay of pulsar-client-go's perf tool,
// which the benchmarks use) and the
// server, on one goroutine, reads it, writes it to a file filled with zeros beforehand (padded to
// whole 4 KiB blocks, so that no write reads a block back), optionally fdatasyncs, and writes a
// 64-byte reply. Nothing else: no parsing, no index, no second file, no hand-off between goroutines.
// A broker that fsyncs every group commit costs at least this per commit; on a virtual machine most
// of it is the kernel and the hypervisor waking a thread, not the work itself.
//
// The server runs as a child process (this program with -cpu-floor-server), so that its CPU time
// (getrusage) is the server's alone; the client is this process.

const (
	floorReply    = 64
	floorFileSize = 64 << 20
	floorBlock    = 4096
	// floorWarmUp rounds are not counted: the first ones pay for warming up. At 1 ms a round a
	// measurement needs well over half a second.
	floorWarmUp = 500
	// floorAccept bounds the child's wait for its parent's connection, so that a child whose
	// parent died does not stay behind.
	floorAccept = 30 * time.Second
)

// cpuFloor runs the server child with or without fdatasync for dur and returns its summary line.
func cpuFloor(dir string, batch int, fsync bool, dur time.Duration) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	args := []string{"-cpu-floor-server", "-dir", dir, "-floor-fsync=" + fmt.Sprint(fsync)}
	child := exec.Command(self, args...)
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := child.Start(); err != nil {
		return "", err
	}
	// failed ends the child and says why the measurement failed: its exit status, when it
	// exited with one (it printed its error on stderr), else err.
	failed := func(err error) (string, error) {
		child.Process.Kill() //nolint:errcheck // it may have exited already
		var exit *exec.ExitError
		if werr := child.Wait(); errors.As(werr, &exit) && exit.ExitCode() > 0 { // not the kill
			return "", fmt.Errorf("cpu floor server: %w", werr)
		}
		return "", err
	}
	lines := bufio.NewScanner(out)
	if !lines.Scan() { // the child prints its address once it listens
		return failed(errors.New("cpu floor server: no address"))
	}
	conn, err := net.Dial("tcp", strings.TrimSpace(lines.Text()))
	if err != nil {
		return failed(err)
	}
	defer conn.Close()
	go io.Copy(io.Discard, conn) //nolint:errcheck // the replies; ends when conn closes
	msg := make([]byte, batch)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for end := time.Now().Add(dur); time.Now().Before(end); {
		<-tick.C
		if _, err := conn.Write(msg); err != nil {
			return failed(err)
		}
	}
	conn.(*net.TCPConn).CloseWrite() //nolint:errcheck // the server reports when it reads the end
	if !lines.Scan() {
		return failed(errors.New("cpu floor server: no result"))
	}
	if err := child.Wait(); err != nil {
		return "", fmt.Errorf("cpu floor server: %w", err)
	}
	what := "read, write, reply"
	if fsync {
		what = "read, write, fdatasync, reply"
	}
	return fmt.Sprintf("CPU floor of a round (%d B batches 1 ms apart; %s on one goroutine): %s", batch, what, lines.Text()), nil
}

// cpuFloorServer is the child: it serves one connection and prints its CPU per round, counted
// after floorWarmUp rounds.
func cpuFloorServer(dir string, fsync bool) error {
	f, err := zeroFilledFile(dir, floorFileSize)
	if err != nil {
		return err
	}
	defer f.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	if err := ln.(*net.TCPListener).SetDeadline(time.Now().Add(floorAccept)); err != nil {
		return err
	}
	fmt.Println(ln.Addr())
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	in := make([]byte, 256<<10)
	block := make([]byte, len(in)+floorBlock)
	reply := make([]byte, floorReply)
	var (
		off    int64
		rounds int
		start  syscall.Rusage
		began  time.Time
	)
	for {
		n, err := c.Read(in)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if rounds == floorWarmUp {
			if err := syscall.Getrusage(syscall.RUSAGE_SELF, &start); err != nil {
				return err
			}
			began = time.Now()
		}
		size := (n + floorBlock - 1) / floorBlock * floorBlock
		copy(block, in[:n])
		if off+int64(size) > floorFileSize {
			off = 0
		}
		if _, err := f.WriteAt(block[:size], off); err != nil {
			return err
		}
		off += int64(size)
		if fsync {
			if err := fdatasync(f); err != nil {
				return err
			}
		}
		if _, err := c.Write(reply); err != nil {
			return err
		}
		rounds++
	}
	measured := rounds - floorWarmUp
	if measured < 1 {
		return fmt.Errorf("only %d rounds, %d of them to warm up: measure for longer", rounds, floorWarmUp)
	}
	var end syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &end); err != nil {
		return err
	}
	user := time.Duration(end.Utime.Nano() - start.Utime.Nano())
	sys := time.Duration(end.Stime.Nano() - start.Stime.Nano())
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(measured) }
	fmt.Printf("%.1f µs per round (user %.1f, system %.1f), %.0f rounds/s\n",
		per(user+sys), per(user), per(sys), float64(measured)/time.Since(began).Seconds())
	return nil
}
