// Command traceprocs reads a Go execution trace and says how the scheduler's Ps spent it: running
// Go code, held by a goroutine in a system call (a P is handed to another thread only once the
// runtime's monitor notices), or idle; which system calls held Ps longest; and, per goroutine,
// the share of the trace it spent running, waiting for a P (runnable), in system calls and blocked.
// docs/catch-up-cpu.md uses it on the replication catch-up's trace:
//
//	MERIDIAN_BENCH_TRACE=1 MERIDIAN_BENCH_PROFILE=/tmp/cu MERIDIAN_BENCH_CATCHUP=400000 MERIDIAN_BENCH_BATCH=1 \
//	  go test -count=1 -run 'TestReplicationCatchUpThroughput$' -v ./internal/replication
//	cd tests && go run ./cmd/traceprocs /tmp/cu.trace.out
package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

func main() {
	top := flag.Int("top", 12, "system call stacks and goroutines to list")
	depth := flag.Int("depth", 7, "frames of a system call's stack to show")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: traceprocs [-top N] [-depth N] trace.out")
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer f.Close()
	s, err := analyse(f, *depth)
	if err != nil {
		fmt.Fprintln(os.Stderr, "traceprocs:", err)
		os.Exit(1)
	}
	s.print(os.Stdout, *top)
}

// pState is what a P is doing.
type pState int

const (
	pIdle pState = iota
	pRunning
	pInSyscall
)

// proc accumulates one P's time by state.
type proc struct {
	state   pState
	since   trace.Time
	byState [3]time.Duration
	// The system call holding the P: its start and its stack's key.
	syscallStart trace.Time
	syscallStack string
}

func (p *proc) enter(s pState, t trace.Time) {
	p.byState[p.state] += time.Duration(t - p.since)
	p.state, p.since = s, t
}

// goroutine accumulates one goroutine's time by state.
type goroutine struct {
	label   string
	state   string
	since   trace.Time
	byState map[string]time.Duration
}

type summary struct {
	wall       time.Duration
	procs      map[trace.ProcID]*proc
	heldBy     map[string]time.Duration // system call stack -> time it held a P
	goroutines map[trace.GoID]*goroutine
}

func analyse(r io.Reader, depth int) (*summary, error) {
	tr, err := trace.NewReader(r)
	if err != nil {
		return nil, err
	}
	s := &summary{procs: map[trace.ProcID]*proc{}, heldBy: map[string]time.Duration{}, goroutines: map[trace.GoID]*goroutine{}}
	var first, last trace.Time
	procAt := func(id trace.ProcID, t trace.Time) *proc {
		p := s.procs[id]
		if p == nil {
			p = &proc{since: t}
			s.procs[id] = p
		}
		return p
	}
	endSyscall := func(p *proc, t trace.Time) {
		if p.state == pInSyscall {
			s.heldBy[p.syscallStack] += time.Duration(t - p.syscallStart)
		}
	}
	for {
		ev, err := tr.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		t := ev.Time()
		if first == 0 {
			first = t
		}
		last = t
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		switch st.Resource.Kind {
		case trace.ResourceProc:
			_, to := st.Proc()
			p := procAt(st.Resource.Proc(), t)
			switch {
			case to == trace.ProcIdle: // stopped, or taken from a thread in a system call
				endSyscall(p, t)
				p.enter(pIdle, t)
			case to == trace.ProcRunning && p.state == pIdle:
				p.enter(pRunning, t)
			}
		case trace.ResourceGoroutine:
			from, to := st.Goroutine()
			id := st.Resource.Goroutine()
			g := s.goroutines[id]
			if g == nil {
				g = &goroutine{since: t, byState: map[string]time.Duration{}}
				s.goroutines[id] = g
			}
			if g.state != "" {
				g.byState[g.state] += time.Duration(t - g.since)
			}
			g.state, g.since = to.String(), t
			if to == trace.GoWaiting {
				g.state = "blocked: " + st.Reason
			}
			if g.label == "" && (to == trace.GoWaiting || to == trace.GoSyscall || (from == trace.GoRunning && to == trace.GoRunnable)) {
				for fr := range st.Stack.Frames() {
					g.label = fr.Func // the outermost frame: what the goroutine was started with
				}
			}
			pid := ev.Proc()
			if pid == trace.NoProc {
				continue
			}
			p := procAt(pid, t)
			switch to {
			case trace.GoRunning:
				endSyscall(p, t)
				p.enter(pRunning, t)
			case trace.GoSyscall:
				p.enter(pInSyscall, t)
				p.syscallStart, p.syscallStack = t, stackKey(st.Stack, depth)
			}
		}
	}
	s.wall = time.Duration(last - first)
	for _, p := range s.procs {
		endSyscall(p, last)
		p.enter(p.state, last)
	}
	for _, g := range s.goroutines {
		if g.state != "" {
			g.byState[g.state] += time.Duration(last - g.since)
		}
	}
	return s, nil
}

func stackKey(st trace.Stack, depth int) string {
	var fs []string
	for fr := range st.Frames() {
		if len(fs) == depth {
			break
		}
		fs = append(fs, fr.Func)
	}
	return strings.Join(fs, " < ")
}

func (s *summary) print(w io.Writer, top int) {
	if s.wall <= 0 {
		fmt.Fprintln(w, "the trace holds no time")
		return
	}
	share := func(d time.Duration) float64 { return 100 * float64(d) / float64(s.wall) }
	fmt.Fprintf(w, "trace: %v, %d Ps\n", s.wall.Round(time.Millisecond), len(s.procs))
	var total [3]time.Duration
	ids := make([]trace.ProcID, 0, len(s.procs))
	for id := range s.procs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		p := s.procs[id]
		fmt.Fprintf(w, "P%d: running %.0f%%, held in a system call %.0f%%, idle %.0f%%\n", id,
			share(p.byState[pRunning]), share(p.byState[pInSyscall]), share(p.byState[pIdle]))
		for i := range total {
			total[i] += p.byState[i]
		}
	}
	fmt.Fprintf(w, "all Ps: running %.2f, held in system calls %.2f, idle %.2f (Ps on average)\n\n",
		float64(total[pRunning])/float64(s.wall), float64(total[pInSyscall])/float64(s.wall), float64(total[pIdle])/float64(s.wall))

	type held struct {
		stack string
		d     time.Duration
	}
	var calls []held
	for k, d := range s.heldBy {
		calls = append(calls, held{k, d})
	}
	slices.SortFunc(calls, func(a, b held) int { return cmp.Compare(b.d, a.d) })
	fmt.Fprintln(w, "system calls by the time they held a P (share of the trace, summed over Ps):")
	for _, c := range calls[:min(top, len(calls))] {
		fmt.Fprintf(w, "%6.1f%%  %s\n", share(c.d), c.stack)
	}

	type busy struct {
		id trace.GoID
		g  *goroutine
		d  time.Duration
	}
	var gs []busy
	for id, g := range s.goroutines {
		gs = append(gs, busy{id, g, g.byState["Running"] + g.byState["Runnable"] + g.byState["Syscall"]})
	}
	slices.SortFunc(gs, func(a, b busy) int { return cmp.Compare(b.d, a.d) })
	fmt.Fprintln(w, "\ngoroutines by time running, runnable or in system calls (share of the trace by state):")
	for _, b := range gs[:min(top, len(gs))] {
		states := make([]string, 0, len(b.g.byState))
		for k := range b.g.byState {
			states = append(states, k)
		}
		slices.SortFunc(states, func(x, y string) int { return cmp.Compare(b.g.byState[y], b.g.byState[x]) })
		var parts []string
		for _, k := range states {
			if sh := share(b.g.byState[k]); sh >= 1 {
				parts = append(parts, fmt.Sprintf("%s %.0f%%", k, sh))
			}
		}
		fmt.Fprintf(w, "g%-6d %s: %s\n", b.id, cmp.Or(b.g.label, "?"), strings.Join(parts, ", "))
	}
}
