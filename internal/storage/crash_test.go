package storage

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// crashModel is what the test knows about one ledger.
type crashModel struct {
	name      string
	acked     map[mtypes.Position][]byte // acknowledged appends
	attempted map[string]bool            // data of every append ever issued
	trimBound mtypes.Position            // entries <= this may have been trimmed
	lastMD    mtypes.Position            // the highest cursor mark-delete ever held in memory (acknowledged)
	flushedMD mtypes.Position            // cursor mark-delete at the last successful Flush
	hasCursor bool
}

// TestRandomizedCrash interleaves appends, acks, trims, rolls, I/O errors and crashes (dropping
// unsynced data, tearing tails) over many seeds and checks after every crash that every
// acknowledged entry is present and intact, nothing unknown appears, order holds, and cursors
// never move forward past what was acknowledged.
func TestRandomizedCrash(t *testing.T) {
	seeds := 60
	if testing.Short() {
		seeds = 15
	}
	for _, seed := range crashSeeds(t, seeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runCrashSeed(t, seed, false) })
	}
}

// crashSeeds is seeds 1..n, or the range CRASH_SEEDS names ("first-last" or "first-last/step")
// when a search for a rare failure wants other seeds (every 24th seed has the same options).
func crashSeeds(t *testing.T, n int) []uint64 {
	first, last, step := uint64(1), uint64(n), uint64(1)
	if v := os.Getenv("CRASH_SEEDS"); v != "" {
		span, stepText, hasStep := strings.Cut(v, "/")
		a, b, _ := strings.Cut(span, "-")
		var errs [3]error
		first, errs[0] = strconv.ParseUint(a, 10, 64)
		last, errs[1] = strconv.ParseUint(b, 10, 64)
		if hasStep {
			step, errs[2] = strconv.ParseUint(stepText, 10, 64)
		}
		if err := errors.Join(errs[:]...); err != nil || step == 0 {
			t.Fatalf("CRASH_SEEDS=%q: want first-last or first-last/step", v)
		}
	}
	var seeds []uint64
	for s := first; s <= last; s += step {
		seeds = append(seeds, s)
	}
	return seeds
}

// TestRandomizedCrashDirect: the same with bursts large enough that most group commits write
// their ledgers' entries directly to the segments (directwrite.go), so crashes, injected faults,
// rolls and trims hit ledgers in and out of direct mode.
func TestRandomizedCrashDirect(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 10
	}
	for seed := 1; seed <= seeds; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runCrashSeed(t, uint64(1000+seed), true) })
	}
}

func runCrashSeed(t *testing.T, seed uint64, bigBursts bool) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	crashLog.take() // the previous seed's
	fs := vfs.NewMem()
	mod := func(o *Options) {
		o.JournalFileBytes = int64(4<<10 + rng.IntN(64<<10))
		o.SegmentMaxEntries = int64(5 + rng.IntN(40))
		o.CacheBytes = int64(rng.IntN(2)) * 64 << 10
		o.CursorFlushInterval = time.Hour // the test flushes explicitly (and at random)
		o.TrimInterval = time.Hour
		o.MaxOpenFiles = 2 + rng.IntN(8)
		// One, two or three group-commit fsyncs in flight (pipelinesync.go).
		o.SyncPipelineDepth = 1 + int(seed%3)
		o.AlwaysPipeline = seed%2 == 0 // otherwise a light load commits inline (commitLight)
		// Direct writes (directwrite.go): never, or from a few hundred bytes of a ledger's
		// entries per group commit, so that bursts switch ledgers in and out of direct mode.
		o.DirectWriteBytes = []int{-1, 100, 300, 1200}[(seed/3)%4]
		// Segment writes around the page cache (unbuffered.go): never, every one, or from a few
		// hundred bytes or a block, so that blocks, tails and padding meet crashes and faults.
		o.BypassCacheBytes = []int{-1, 1, 400, 4096}[(seed/2)%4]
		if bigBursts {
			o.DirectWriteBytes = 500 + rng.IntN(1500)
			o.JournalFileBytes *= 8
		}
	}
	e := openMem(t, fs, mod)
	models := map[string]*crashModel{}
	names := []string{"t/a", "t/b", "persistent://p/ns/c-partition-0"}
	for _, n := range names {
		models[n] = &crashModel{name: n, acked: map[mtypes.Position][]byte{}, attempted: map[string]bool{}, trimBound: mtypes.Position{LedgerID: -1, EntryID: -1}}
	}
	ledgers := map[string]*Ledger{}
	getLedger := func(n string) *Ledger {
		l := ledgers[n]
		if l != nil && l.Err() == nil {
			return l
		}
		if l != nil {
			_ = l.Close()
		}
		l, err := e.OpenLedger(ctx, n)
		if err != nil {
			return nil
		}
		ledgers[n] = l
		m := models[n]
		if c := l.Cursor("sub"); c != nil {
			if md := c.MarkDeletePosition(); md.Compare(m.lastMD) > 0 {
				m.lastMD = md
			}
		} else if !m.hasCursor {
			if c, err := l.OpenCursor(ctx, "sub", CursorOptions{Initial: mtypes.Earliest, Durable: true}); err == nil {
				m.hasCursor = true
				m.lastMD = c.MarkDeletePosition()
				m.flushedMD = m.lastMD
			}
		}
		return l
	}
	var seq int
	var faults bool
	var ackMu sync.Mutex
	for step := 0; step < 120; step++ {
		n := names[rng.IntN(len(names))]
		m := models[n]
		l := getLedger(n)
		if l == nil {
			continue
		}
		switch op := rng.IntN(100); {
		case op < 40: // a burst of concurrent appends
			k, size := 1+rng.IntN(20), 300
			if bigBursts {
				k, size = 1+rng.IntN(120), 1000
			}
			var wg sync.WaitGroup
			wg.Add(k)
			for i := 0; i < k; i++ {
				seq++
				data := []byte(fmt.Sprintf("%s#%d#%s", n, seq, strings.Repeat("z", rng.IntN(size))))
				m.attempted[string(data)] = true
				l.AppendAsync(data, time.Now().UnixMilli(), func(p mtypes.Position, err error) {
					if err == nil {
						ackMu.Lock()
						m.acked[p] = data
						ackMu.Unlock()
					}
					wg.Done()
				})
			}
			if rng.IntN(4) == 0 {
				// Crash while appends are in flight: only acks seen before the crash count.
				ackMu.Lock()
				snapshot := cloneAcked(models)
				crashed := fs.Crash(rng)
				ackMu.Unlock()
				wg.Wait()
				fs.SetInjector(nil)
				_ = e.Close()
				fs = crashed
				e, ledgers = reopenAndVerify(t, fs, mod, models, snapshot), map[string]*Ledger{}
				faults = false
				continue
			}
			wg.Wait()
		case op < 55 && m.hasCursor: // acks
			c := l.Cursor("sub")
			if c == nil {
				break
			}
			ackMu.Lock()
			var ps []mtypes.Position
			for p := range m.acked {
				ps = append(ps, p)
			}
			ackMu.Unlock()
			if len(ps) == 0 {
				break
			}
			p := ps[rng.IntN(len(ps))]
			if rng.IntN(2) == 0 {
				_ = c.MarkDelete(ctx, p)
			} else {
				_ = c.Delete(ctx, p)
			}
			dbg(t, "%s ack %v -> md %v", n, p, c.MarkDeletePosition())
			if md := c.MarkDeletePosition(); md.Compare(m.lastMD) > 0 {
				m.lastMD = md
			}
		case op < 62 && m.hasCursor:
			if c := l.Cursor("sub"); c != nil {
				md := c.MarkDeletePosition()
				if err := c.Flush(ctx); err == nil {
					m.flushedMD = md
				}
				dbg(t, "%s flush md %v flushed %v", n, md, m.flushedMD)
			}
		case op < 78: // roll (which trims) or trim
			if c := l.Cursor("sub"); c != nil {
				if md := c.MarkDeletePosition(); md.Compare(m.trimBound) > 0 {
					m.trimBound = md
				}
			}
			if op < 70 {
				_ = l.Roll(ctx)
			} else {
				_ = l.Trim(ctx)
			}
			dbg(t, "%s roll/trim first %v lc %v", n, l.FirstPosition(), l.LastConfirmed())
		case op < 85:
			faults = !faults
			if faults {
				frng := rand.New(rand.NewPCG(seed, uint64(step)))
				var fmu sync.Mutex
				fs.SetInjector(func(op vfs.Op, name string) error {
					if op != vfs.OpWrite && op != vfs.OpSync {
						return nil
					}
					fmu.Lock()
					defer fmu.Unlock()
					if frng.IntN(25) != 0 {
						return nil
					}
					if frng.IntN(2) == 0 {
						return vfs.ENOSPC
					}
					return vfs.EIO
				})
			} else {
				fs.SetInjector(nil)
			}
		default: // crash at rest
			ackMu.Lock()
			snapshot := cloneAcked(models)
			crashed := fs.Crash(rng)
			ackMu.Unlock()
			fs.SetInjector(nil)
			_ = e.Close()
			fs = crashed
			e, ledgers = reopenAndVerify(t, fs, mod, models, snapshot), map[string]*Ledger{}
			faults = false
		}
	}
	fs.SetInjector(nil)
	_ = e.Close()
}

// crashLog collects the engines' log lines with CRASHDBG=1, for the dump of a failed seed.
var crashLog lockedBuffer

// lockedBuffer is a log destination shared by an engine's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// take returns what was written since the last take.
func (b *lockedBuffer) take() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.String()
	b.buf.Reset()
	return s
}

func dbg(t *testing.T, f string, args ...any) {
	if os.Getenv("CRASH_DEBUG") != "" {
		t.Logf(f, args...)
	}
}

func cloneAcked(models map[string]*crashModel) map[string]map[mtypes.Position][]byte {
	out := map[string]map[mtypes.Position][]byte{}
	for n, m := range models {
		c := make(map[mtypes.Position][]byte, len(m.acked))
		for p, d := range m.acked {
			c[p] = d
		}
		out[n] = c
	}
	return out
}

func reopenAndVerify(t *testing.T, fs *vfs.Mem, mod func(*Options), models map[string]*crashModel, acked map[string]map[mtypes.Position][]byte) *Engine {
	t.Helper()
	ctx := context.Background()
	before := ""
	if os.Getenv("CRASHDBG") != "" {
		before = fs.String() + dumpJournalsForTest(fs) + "engine log before the crash:\n" + crashLog.take()
		defer func() {
			if t.Failed() {
				t.Logf("engine log of the recovery:\n%s", crashLog.take())
			}
		}()
	}
	o := Options{Dir: "/data", FS: fs, Logger: testLogger()}
	mod(&o)
	e, err := Open(ctx, o)
	if err != nil {
		if before != "" {
			t.Logf("files after the crash, before recovery:\n%s", before)
		}
		t.Fatalf("open after a crash: %v", err)
	}
	for n, m := range models {
		l, err := e.OpenLedger(ctx, n)
		if err != nil {
			t.Fatalf("reopen %s: %v", n, err)
		}
		if err := l.Err(); err != nil {
			if os.Getenv("CRASHDBG") != "" {
				t.Logf("files after the crash, before recovery:\n%s", before)
			}
			t.Fatalf("ledger %s fenced after a plain crash: %v", n, err)
		}
		es, err := l.Read(ctx, mtypes.Earliest, 0, 0)
		if err != nil {
			t.Fatalf("read %s: %v", n, err)
		}
		present := map[mtypes.Position][]byte{}
		prev := mtypes.Position{LedgerID: -1, EntryID: -1}
		for _, en := range es {
			if en.Position.Compare(prev) <= 0 {
				t.Fatalf("%s: positions out of order: %v after %v", n, en.Position, prev)
			}
			prev = en.Position
			if !m.attempted[string(en.Data)] {
				t.Fatalf("%s: unknown entry at %v: %q", n, en.Position, en.Data)
			}
			present[en.Position] = en.Data
		}
		for p, d := range acked[n] {
			got, ok := present[p]
			if !ok {
				if p.Compare(m.trimBound) <= 0 {
					continue
				}
				if before != "" {
					t.Logf("files after the crash, before recovery:\n%s", before)
				}
				t.Fatalf("%s: acknowledged entry %v lost (trim bound %v, %d present)", n, p, m.trimBound, len(es))
			}
			if !bytes.Equal(got, d) {
				t.Fatalf("%s: entry %v corrupted", n, p)
			}
		}
		// The model forgets what is not acknowledged-before-crash or present now.
		m.acked = map[mtypes.Position][]byte{}
		for p, d := range acked[n] {
			if _, ok := present[p]; ok {
				m.acked[p] = d
			}
		}
		dbg(t, "%s reopened: first %v lc %v entries %d", n, l.FirstPosition(), l.LastConfirmed(), l.Entries())
		if c := l.Cursor("sub"); c != nil && !m.hasCursor {
			// Created while faults were injected: OpenCursor failed, but the record made it.
			m.hasCursor = true
			m.lastMD = c.MarkDeletePosition()
			m.flushedMD = m.lastMD
		} else if c != nil {
			md := c.MarkDeletePosition()
			for _, en := range es {
				if en.Position.Compare(m.lastMD) > 0 && en.Position.Compare(md) <= 0 {
					t.Fatalf("%s: cursor moved forward across a crash over unacknowledged %v: %v > %v", n, en.Position, md, m.lastMD)
				}
			}
			if md.Compare(m.flushedMD) < 0 && m.flushedMD.Compare(prev) <= 0 {
				t.Fatalf("%s: cursor lost a flushed position: %v < %v", n, md, m.flushedMD)
			}
			var want int64
			for _, en := range es {
				if !c.IsAcknowledged(en.Position) {
					want++
				}
			}
			if got := c.Backlog(); got != want {
				t.Fatalf("%s: backlog %d, counted %d", n, got, want)
			}
			// A state written just before a failed fsync may survive the crash: that is an
			// acknowledgement that was made, so lastMD (the maximum ever acknowledged) still bounds it.
			if md.Compare(m.lastMD) > 0 {
				m.lastMD = md
			}
			m.flushedMD = md
		} else if m.hasCursor {
			t.Fatalf("%s: durable cursor lost", n)
		}
		if err := l.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Fatalf("close %s: %v", n, err)
		}
	}
	return e
}

// dumpJournalsForTest lists the records of every journal file in fs (CRASHDBG=1).
func dumpJournalsForTest(fs *vfs.Mem) string {
	var b strings.Builder
	logf := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	if data, err := readWholeFile(fs, "/data/"+stateFile); err == nil {
		st, err := decodeEngineState(data)
		logf("state: first journal %d, ledger id limit %d, incarnations %d, err %v", st.firstJournal, st.ledgerIDLimit, st.incarnations, err)
	}
	des, _ := fs.ReadDir("/data/journal")
	for _, de := range des {
		if !strings.HasSuffix(de.Name, ".jnl") {
			continue
		}
		f, err := fs.OpenFile("/data/journal/"+de.Name, vfs.ReadOnly)
		if err != nil {
			continue
		}
		size, _ := f.Size()
		data := make([]byte, size)
		n, _ := f.ReadAt(data, 0)
		f.Close()
		data = data[:n]
		hseq, _, seed, err := parseJournalHeader(data)
		logf("journal %s: %d bytes, header seq %d err %v", de.Name, len(data), hseq, err)
		if err != nil {
			continue
		}
		for off := headerSize; off < len(data); {
			body, sz, err := decodeRecord(data[off:], seed)
			if err != nil {
				logf("  @%d: end (%v), zero tail %v", off, err, allZero(data[off:]))
				break
			}
			desc := fmt.Sprintf("type %d", body[0])
			if body[0] != jAnnounce && len(body) >= 5 {
				desc += fmt.Sprintf(" [slot %d]", binary.LittleEndian.Uint32(body[1:]))
			}
			if body[0] == jVoid {
				for p := body[5:]; len(p) >= 16; p = p[16:] {
					desc += fmt.Sprintf(" (ledger %d from %d)", binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint64(p[8:]))
				}
			}
			if body[0] == jAnnounce {
				desc += fmt.Sprintf(" slot %d %q", binary.LittleEndian.Uint32(body[1:]), body[5:])
			}
			if len(body) >= 13 && (body[0] == 1 || body[0] == 10 || body[0] == 11 || body[0] == 5) {
				desc += fmt.Sprintf(" ledger %d", binary.LittleEndian.Uint64(body[5:]))
				if body[0] == 1 && len(body) >= 21+recHeaderSize {
					desc += fmt.Sprintf(" entry %d", binary.LittleEndian.Uint64(body[13+recHeaderSize:]))
				}
				if body[0] == 10 && len(body) >= 41 {
					desc += fmt.Sprintf(" first %d count %d off %d len %d", binary.LittleEndian.Uint64(body[13:]), binary.LittleEndian.Uint32(body[21:]), binary.LittleEndian.Uint64(body[25:]), binary.LittleEndian.Uint64(body[33:]))
				}
			}
			logf("  @%d: %s", off, desc)
			off += sz
		}
	}
	return b.String()
}
