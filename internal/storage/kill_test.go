package storage

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

const killWriterEnv = "MERIDIAN_STORAGE_KILL_WRITER"

func killPayload(topic, seq int) []byte {
	return []byte(fmt.Sprintf("topic-%d-seq-%d-%s", topic, seq, strings.Repeat("p", (seq*37)%2000)))
}

// runKillWriter is the child process: it appends to a few ledgers from several goroutines and
// prints "ack <topic> <seq> <ledger> <entry>" for every acknowledged append, until killed.
func runKillWriter(dir string) {
	ctx := context.Background()
	e, err := Open(ctx, Options{Dir: dir, Logger: testLogger(), JournalFileBytes: 1 << 20, SegmentMaxEntries: 300})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for topic := 0; topic < 4; topic++ {
		l, err := e.OpenLedger(ctx, fmt.Sprintf("kill/topic-%d", topic))
		if err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					seq := g*1_000_000 + i
					p, err := l.Append(ctx, killPayload(topic, seq), time.Now().UnixMilli())
					if err != nil {
						fmt.Println("error", err)
						os.Exit(2)
					}
					mu.Lock()
					fmt.Fprintf(out, "ack %d %d %d %d\n", topic, seq, p.LedgerID, p.EntryID)
					out.Flush()
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
}

func TestMain(m *testing.M) {
	if dir := os.Getenv(killWriterEnv); dir != "" {
		runKillWriter(dir)
		os.Exit(0)
	}
	runWithLeakCheck(m)
}

// TestKillNine runs a writer process, kills it with SIGKILL at a random moment, reopens its
// data directory and checks every acknowledged append. Repeated (20 times without -short).
func TestKillNine(t *testing.T) {
	reps := 20
	if testing.Short() {
		reps = 3
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
	acked := map[string]map[mtypes.Position]int{} // ledger -> position -> seq
	for rep := 0; rep < reps; rep++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), killWriterEnv+"="+dir)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		deadline := time.After(time.Duration(50+rng.IntN(400)) * time.Millisecond)
		killed := false
		n := 0
		for !killed {
			select {
			case <-deadline:
				_ = cmd.Process.Signal(syscall.SIGKILL)
				killed = true
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("writer exited early: %v", cmd.Wait())
				}
				n += recordAck(t, line, acked)
			}
		}
		// Everything printed before the kill was acknowledged before it.
		for line := range lines {
			n += recordAck(t, line, acked)
		}
		_ = cmd.Wait()
		t.Logf("rep %d: %d acks", rep, n)
		verifyKillDir(t, dir, acked)
	}
}

func recordAck(t *testing.T, line string, acked map[string]map[mtypes.Position]int) int {
	f := strings.Fields(line)
	if len(f) != 5 || f[0] != "ack" {
		t.Fatalf("writer said %q", line)
	}
	var v [4]int64
	for i := range v {
		x, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil {
			t.Fatalf("bad line %q", line)
		}
		v[i] = x
	}
	name := fmt.Sprintf("kill/topic-%d", v[0])
	if acked[name] == nil {
		acked[name] = map[mtypes.Position]int{}
	}
	acked[name][mtypes.Position{LedgerID: v[2], EntryID: v[3]}] = int(v[1])
	return 1
}

func verifyKillDir(t *testing.T, dir string, acked map[string]map[mtypes.Position]int) {
	t.Helper()
	ctx := context.Background()
	e, err := Open(ctx, Options{Dir: dir, Logger: testLogger()})
	if err != nil {
		t.Fatalf("reopen after kill: %v", err)
	}
	defer e.Close()
	for name, want := range acked {
		l, err := e.OpenLedger(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Err(); err != nil {
			t.Fatalf("%s fenced after kill: %v", name, err)
		}
		es, err := l.Read(ctx, mtypes.Earliest, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		got := make(map[mtypes.Position][]byte, len(es))
		for _, en := range es {
			got[en.Position] = en.Data
		}
		var topic int
		fmt.Sscanf(name, "kill/topic-%d", &topic)
		for p, seq := range want {
			d, ok := got[p]
			if !ok {
				t.Fatalf("%s: acknowledged %v (seq %d) missing after kill -9", name, p, seq)
			}
			if !bytes.Equal(d, killPayload(topic, seq)) {
				t.Fatalf("%s: %v holds the wrong data", name, p)
			}
		}
	}
}
