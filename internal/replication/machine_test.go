package replication

import (
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// mkEntry builds a stored entry with the given metadata tweaks.
func mkEntry(t testing.TB, pos mtypes.Position, payload string, tweak func(md *pulsarpb.MessageMetadata)) mtypes.Entry {
	t.Helper()
	md := &pulsarpb.MessageMetadata{
		ProducerName: proto.String("app-producer"),
		SequenceId:   proto.Uint64(uint64(pos.EntryID)),
		PublishTime:  proto.Uint64(uint64(t0.UnixMilli())),
		Properties:   []*pulsarpb.KeyValue{{Key: proto.String("k"), Value: proto.String("v")}},
	}
	if tweak != nil {
		tweak(md)
	}
	data, err := EncodeEntry(md, []byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	return mtypes.Entry{Position: pos, PublishTime: t0.UnixMilli(), Data: data}
}

func cfgAB() MachineConfig { return MachineConfig{Local: "a", Remote: "b"} }

func findAct[T Action](acts []Action) (T, bool) {
	for _, a := range expand(acts) {
		if v, ok := a.(T); ok {
			return v, true
		}
	}
	var zero T
	return zero, false
}

func mustAct[T Action](t *testing.T, acts []Action) T {
	t.Helper()
	v, ok := findAct[T](acts)
	if !ok {
		var zero T
		t.Fatalf("no %T in %#v", zero, acts)
	}
	return v
}

func sends(acts []Action) []ActSend {
	var out []ActSend
	for _, a := range acts {
		switch s := a.(type) {
		case ActSend:
			out = append(out, s)
		case ActSends:
			for _, o := range s.Outs {
				out = append(out, ActSend{Gen: s.Gen, Out: o})
			}
		}
	}
	return out
}

// expand replaces each ActSends by its ActSend actions, in order.
func expand(acts []Action) []Action {
	var out []Action
	for _, a := range acts {
		if s, ok := a.(ActSends); ok {
			for _, o := range s.Outs {
				out = append(out, ActSend{Gen: s.Gen, Out: o})
			}
			continue
		}
		out = append(out, a)
	}
	return out
}

// The Machine's behaviour is specified by the transcripts in testdata/machine
// (TestMachineTranscripts). This file has what a transcript does not show well: the bytes sent, the
// read-ahead bound by bytes, the rate over ten seconds, a randomized simulation with failures, and
// the window's memory.

// TestMachineSendsReplicatedFrom: the bytes sent carry replicated_from=a and the source position;
// everything else of the entry is kept.
func TestMachineSendsReplicatedFrom(t *testing.T) {
	m := NewMachine(cfgAB())
	c := mustAct[ActConnect](t, m.Handle(EvStart{Now: t0, MarkDelete: mtypes.Position{LedgerID: 7, EntryID: 2}}))
	rd := mustAct[ActRead](t, m.Handle(EvConnected{Now: t0, Gen: c.Gen}))
	e := mkEntry(t, mtypes.Position{LedgerID: 7, EntryID: 3}, "to-b", func(md *pulsarpb.MessageMetadata) { md.ReplicateTo = []string{"a", "b"} })
	ss := sends(m.Handle(EvReadDone{Now: t0, Epoch: rd.Epoch, Entries: []mtypes.Entry{e}}))
	if len(ss) != 1 {
		t.Fatalf("sends = %+v", ss)
	}
	pe, err := ParseEntry(ss[0].Out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if pe.Metadata.GetReplicatedFrom() != "a" || string(pe.Payload) != "to-b" || pe.Metadata.GetProducerName() != "app-producer" || pe.Metadata.GetSequenceId() != 3 {
		t.Fatalf("metadata %v payload %q", pe.Metadata, pe.Payload)
	}
	if o, p, ok, err := SourceOf(pe.Metadata); !ok || err != nil || o != "a" || p != (mtypes.Position{LedgerID: 7, EntryID: 3}) {
		t.Fatalf("SourceOf = %v %v %v %v", o, p, ok, err)
	}
}

// TestMachineReadAheadBoundedByBytes: entries much larger than ReadBatchBytes / ReadBatchEntries
// must not make the machine read batch after batch because fewer than ReadBatchEntries wait.
func TestMachineReadAheadBoundedByBytes(t *testing.T) {
	cfg := cfgAB()
	cfg.MaxInflightEntries = 1
	cfg.ReadBatchEntries = 100
	big := strings.Repeat("b", 4096)
	m := NewMachine(cfg)
	c := mustAct[ActConnect](t, m.Handle(EvStart{Now: t0, MarkDelete: mtypes.Position{LedgerID: 1, EntryID: -1}}))
	rd := mustAct[ActRead](t, m.Handle(EvConnected{Now: t0, Gen: c.Gen}))
	probe := mkEntry(t, mtypes.Position{LedgerID: 1, EntryID: 0}, big, nil)
	out, _, err := PrepareEntry(probe, cfg.Local, cfg.Remote)
	if err != nil {
		t.Fatal(err)
	}
	m.cfg.ReadBatchBytes = int64(3 * out.Size()) // a "full" batch by bytes is three entries
	next := int64(0)
	reads := 0
	for reads < 10 {
		var es []mtypes.Entry
		for range 3 {
			es = append(es, mkEntry(t, mtypes.Position{LedgerID: 1, EntryID: next}, big, nil))
			next++
		}
		acts := m.Handle(EvReadDone{Now: t0, Epoch: rd.Epoch, Entries: es})
		reads++
		r, ok := findAct[ActRead](acts)
		if !ok {
			break
		}
		rd = r
	}
	if reads > 2 {
		t.Fatalf("%d reads with one entry in flight: read-ahead not bounded by bytes", reads)
	}
}

func TestMachineRateLimit(t *testing.T) {
	cfg := cfgAB()
	cfg.Rate = Rate{MessagesPerSecond: 10}
	m := NewMachine(cfg)
	c := mustAct[ActConnect](t, m.Handle(EvStart{Now: t0, MarkDelete: mtypes.Position{LedgerID: 1, EntryID: -1}}))
	now := t0
	acts := m.Handle(EvConnected{Now: now, Gen: c.Gen})
	sent := 0
	next := int64(0)
	// Simulate: the log always has data; the remote answers at once; timers fire on time.
	for steps := 0; steps < 10000 && now.Before(t0.Add(10*time.Second)); steps++ {
		var queue []Event
		for _, a := range expand(acts) {
			switch a := a.(type) {
			case ActRead:
				var es []mtypes.Entry
				for range a.MaxEntries {
					es = append(es, mkEntry(t, mtypes.Position{LedgerID: 1, EntryID: next}, "x", nil))
					next++
				}
				queue = append(queue, EvReadDone{Now: now, Epoch: a.Epoch, Entries: es})
			case ActSend:
				sent++
				queue = append(queue, EvReceipt{Now: now, Gen: a.Gen, Source: a.Out.Source})
			case ActMarkDelete:
				queue = append(queue, EvMarkDeleteDone{Now: now, Pos: a.Pos})
			case ActSetTimer:
				now = now.Add(a.Delay)
				queue = append(queue, EvTimer{Now: now, Kind: a.Kind})
			}
		}
		acts = nil
		for _, ev := range queue {
			acts = append(acts, m.Handle(ev)...)
		}
		if len(acts) == 0 {
			t.Fatalf("stalled at %v after %d sends", now, sent)
		}
	}
	// 10 s at 10 msg/s plus the initial one-second burst.
	if sent < 95 || sent > 115 {
		t.Fatalf("sent %d in 10 s at 10 msg/s", sent)
	}
}

func TestMachineSimulation(t *testing.T) {
	for seed := int64(1); seed <= 30; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { simulate(t, seed) })
	}
}

func simulate(t *testing.T, seed int64) {
	rng := rand.New(rand.NewSource(seed))
	cfg := cfgAB()
	cfg.MaxInflightEntries = 1 + rng.Intn(20)
	cfg.ReadBatchEntries = 1 + rng.Intn(10)
	m := NewMachine(cfg)

	// The local log: 300 entries over 3 ledgers, some to be skipped.
	var log []mtypes.Entry
	want := []mtypes.Position{}
	for i := 0; i < 300; i++ {
		pos := mtypes.Position{LedgerID: int64(10 + i/100), EntryID: int64(i % 100)}
		var tweak func(*pulsarpb.MessageMetadata)
		switch rng.Intn(10) {
		case 0:
			tweak = func(md *pulsarpb.MessageMetadata) { md.ReplicatedFrom = proto.String("c") }
		case 1:
			tweak = func(md *pulsarpb.MessageMetadata) { md.ReplicateTo = []string{LocalOnly} }
		default:
			want = append(want, pos)
		}
		log = append(log, mkEntry(t, pos, fmt.Sprint(i), tweak))
	}
	available := 0 // entries written so far; grows over time
	var stored []mtypes.Position
	seen := map[mtypes.Position]bool{}
	var markDeleted mtypes.Position = mtypes.Position{LedgerID: 10, EntryID: -1}

	type timed struct {
		at time.Time
		ev Event
	}
	now := t0
	var events []timed
	push := func(d time.Duration, ev Event) { events = append(events, timed{now.Add(d), ev}) }
	connected := map[int64]bool{}
	waiting := false
	var waitFrom mtypes.Position

	exec := func(acts []Action) {
		for _, a := range expand(acts) {
			switch a := a.(type) {
			case ActConnect:
				if rng.Intn(4) == 0 {
					push(time.Millisecond, EvConnectFailed{Gen: a.Gen, Err: errors.New("refused")})
				} else {
					connected[a.Gen] = true
					push(time.Millisecond, EvConnected{Gen: a.Gen})
				}
			case ActCloseProducer:
				delete(connected, a.Gen)
			case ActRead:
				if rng.Intn(20) == 0 {
					push(time.Millisecond, EvReadDone{Epoch: a.Epoch, Err: errors.New("read failed")})
					continue
				}
				var es []mtypes.Entry
				for _, e := range log[:available] {
					if e.Position.Compare(a.From) >= 0 && len(es) < a.MaxEntries {
						es = append(es, e)
					}
				}
				push(time.Millisecond, EvReadDone{Epoch: a.Epoch, Entries: es})
			case ActSend:
				if !connected[a.Gen] {
					continue
				}
				switch rng.Intn(50) {
				case 0: // connection drops: this and later sends fail
					delete(connected, a.Gen)
					push(2*time.Millisecond, EvSendFailed{Gen: a.Gen, Err: errors.New("connection reset")})
					continue
				case 1: // stored, receipt lost with the connection
					if !seen[a.Out.Source] {
						seen[a.Out.Source] = true
						stored = append(stored, a.Out.Source)
					}
					delete(connected, a.Gen)
					push(2*time.Millisecond, EvSendFailed{Gen: a.Gen, Err: errors.New("connection reset")})
					continue
				}
				if !seen[a.Out.Source] { // the receiver's dedup by source position
					seen[a.Out.Source] = true
					stored = append(stored, a.Out.Source)
				}
				push(time.Duration(1+rng.Intn(3))*time.Millisecond, EvReceipt{Gen: a.Gen, Source: a.Out.Source})
			case ActMarkDelete:
				if rng.Intn(30) == 0 {
					push(time.Millisecond, EvMarkDeleteDone{Pos: a.Pos, Err: errors.New("flush failed")})
					continue
				}
				if a.Pos.Compare(markDeleted) < 0 {
					t.Fatalf("mark-delete went backwards: %v < %v", a.Pos, markDeleted)
				}
				markDeleted = a.Pos
				push(time.Millisecond, EvMarkDeleteDone{Pos: a.Pos})
			case ActWaitForData:
				// As the topic's WaitForEntries: ready at once if the entry is already stored
				// (it may have been written after the read that found nothing).
				if available > 0 && log[available-1].Position.Compare(a.From) >= 0 {
					push(0, EvDataAvailable{})
					continue
				}
				waiting, waitFrom = true, a.From
			case ActSetTimer:
				push(a.Delay, EvTimer{Kind: a.Kind})
			}
		}
	}
	exec(m.Handle(EvStart{Now: now, MarkDelete: markDeleted}))
	for step := 0; step < 200000; step++ {
		if available < len(log) && rng.Intn(3) == 0 {
			available++
			if waiting && log[available-1].Position.Compare(waitFrom) >= 0 {
				waiting = false
				push(0, EvDataAvailable{})
			}
		}
		if len(events) == 0 {
			if available == len(log) && waiting && markDeleted == log[len(log)-1].Position {
				break // done: caught up and idle
			}
			if available == len(log) {
				t.Fatalf("seed %d: nothing pending and not caught up (markDeleted %v, phase %v, counters %+v)",
					seed, markDeleted, m.Phase(), m.Counters())
			}
			continue
		}
		slices.SortStableFunc(events, func(a, b timed) int { return a.at.Compare(b.at) })
		next := events[0]
		events = events[1:]
		now = next.at
		ev := next.ev
		switch e := ev.(type) {
		case EvConnected:
			e.Now = now
			ev = e
		case EvConnectFailed:
			e.Now = now
			ev = e
		case EvReadDone:
			e.Now = now
			ev = e
		case EvReceipt:
			e.Now = now
			ev = e
			if rng.Intn(2) == 0 {
				// As the runner does: receipts that are queued together go as one EvReceipts.
				batch := EvReceipts{Now: now, Gen: e.Gen, Sources: []mtypes.Position{e.Source}}
				for len(events) > 0 {
					r, ok := events[0].ev.(EvReceipt)
					if !ok || r.Gen != e.Gen {
						break
					}
					batch.Sources = append(batch.Sources, r.Source)
					events = events[1:]
				}
				ev = batch
			}
		case EvSendFailed:
			e.Now = now
			ev = e
		case EvMarkDeleteDone:
			e.Now = now
			ev = e
		case EvDataAvailable:
			e.Now = now
			ev = e
		case EvTimer:
			e.Now = now
			ev = e
		}
		exec(m.Handle(ev))
		exec(m.Handle(EvTick{Now: now}))
	}
	if markDeleted != log[len(log)-1].Position {
		t.Fatalf("seed %d: did not finish: markDeleted %v", seed, markDeleted)
	}
	if m.Counters().Reconnects == 0 {
		t.Fatalf("seed %d: no failure was injected; the simulation tests nothing", seed)
	}
	if !slices.Equal(stored, want) {
		t.Fatalf("seed %d: remote stored %d entries, want %d (order or content differs)", seed, len(stored), len(want))
	}
}

// The window slides through a long log without its backing array growing: acknowledged entries
// leave pending's head and new ones reuse the space (reserve), and every entry is sent once, in
// order.
func TestMachineWindowSlidesWithoutGrowing(t *testing.T) {
	cfg := cfgAB()
	cfg.MaxInflightEntries, cfg.ReadBatchEntries = 100, 30
	m := NewMachine(cfg)
	c := mustAct[ActConnect](t, m.Handle(EvStart{Now: t0, MarkDelete: mtypes.Position{LedgerID: 1, EntryID: -1}}))
	acts := m.Handle(EvConnected{Now: t0, Gen: c.Gen})
	next, want := int64(0), int64(0)
	maxStore := 0
	var inflight []mtypes.Position
	for steps := 0; want < 20000 && steps < 100000; steps++ {
		var queue []Event
		for _, a := range expand(acts) {
			switch a := a.(type) {
			case ActRead:
				var es []mtypes.Entry
				for range a.MaxEntries {
					es = append(es, mkEntry(t, mtypes.Position{LedgerID: 1, EntryID: next}, "x", nil))
					next++
				}
				queue = append(queue, EvReadDone{Now: t0, Epoch: a.Epoch, Entries: es})
			case ActSend:
				if a.Out.Source != (mtypes.Position{LedgerID: 1, EntryID: want}) {
					t.Fatalf("sent %s, want 1:%d", a.Out.Source, want)
				}
				want++
				inflight = append(inflight, a.Out.Source)
			case ActMarkDelete:
				queue = append(queue, EvMarkDeleteDone{Now: t0, Pos: a.Pos})
			}
		}
		// Receipts in uneven groups, as they arrive from a socket.
		if k := min(len(inflight), 1+int(next%37)); k > 0 {
			queue = append(queue, EvReceipts{Now: t0, Gen: c.Gen, Sources: slices.Clone(inflight[:k])})
			inflight = inflight[k:]
		}
		acts = acts[:0]
		for _, ev := range queue {
			acts = append(acts, m.Handle(ev)...)
		}
		maxStore = max(maxStore, cap(m.store))
	}
	if want < 20000 {
		t.Fatalf("only %d entries sent", want)
	}
	if maxStore > 4*(cfg.MaxInflightEntries+cfg.ReadBatchEntries) {
		t.Fatalf("backing array grew to %d items for a window of %d", maxStore, cfg.MaxInflightEntries)
	}
	if lc := m.Counters().LastError; lc != "" {
		t.Fatalf("lastError %q", lc)
	}
}
