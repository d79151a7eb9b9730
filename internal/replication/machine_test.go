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

func TestMachineHappyPathSkipsAndMarkDeletes(t *testing.T) {
	m := NewMachine(cfgAB())
	acts := m.Handle(EvStart{Now: t0, MarkDelete: mtypes.Position{LedgerID: 7, EntryID: -1}})
	c := mustAct[ActConnect](t, acts)
	acts = m.Handle(EvConnected{Now: t0, Gen: c.Gen})
	rd := mustAct[ActRead](t, acts)
	if rd.From != (mtypes.Position{LedgerID: 7, EntryID: 0}) {
		t.Fatalf("first read from %v", rd.From)
	}
	entries := []mtypes.Entry{
		mkEntry(t, mtypes.Position{LedgerID: 7, EntryID: 0}, "one", nil),
		mkEntry(t, mtypes.Position{LedgerID: 7, EntryID: 1}, "from-c", func(md *pulsarpb.MessageMetadata) { md.ReplicatedFrom = proto.String("c") }),
		mkEntry(t, mtypes.Position{LedgerID: 7, EntryID: 2}, "local-only", func(md *pulsarpb.MessageMetadata) { md.ReplicateTo = []string{LocalOnly} }),
		mkEntry(t, mtypes.Position{LedgerID: 7, EntryID: 3}, "to-b", func(md *pulsarpb.MessageMetadata) { md.ReplicateTo = []string{"a", "b"} }),
		mkEntry(t, mtypes.Position{LedgerID: 7, EntryID: 4}, "to-c", func(md *pulsarpb.MessageMetadata) { md.ReplicateTo = []string{"c"} }),
		mkEntry(t, mtypes.Position{LedgerID: 7, EntryID: 5}, "snapshot-marker", func(md *pulsarpb.MessageMetadata) { md.MarkerType = proto.Int32(12) }),
		mkEntry(t, mtypes.Position{LedgerID: 7, EntryID: 6}, "txn-marker", func(md *pulsarpb.MessageMetadata) { md.MarkerType = proto.Int32(20) }),
	}
	acts = m.Handle(EvReadDone{Now: t0, Epoch: rd.Epoch, Entries: entries})
	ss := sends(acts)
	if len(ss) != 2 || ss[0].Out.Source != (mtypes.Position{LedgerID: 7, EntryID: 0}) || ss[1].Out.Source != (mtypes.Position{LedgerID: 7, EntryID: 3}) {
		t.Fatalf("sends = %+v", ss)
	}
	// The sent bytes carry replicated_from=a and the source position; everything else is kept.
	pe, err := ParseEntry(ss[1].Out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if pe.Metadata.GetReplicatedFrom() != "a" || string(pe.Payload) != "to-b" || pe.Metadata.GetProducerName() != "app-producer" || pe.Metadata.GetSequenceId() != 3 {
		t.Fatalf("metadata %v payload %q", pe.Metadata, pe.Payload)
	}
	if o, p, ok, err := SourceOf(pe.Metadata); !ok || err != nil || o != "a" || p != (mtypes.Position{LedgerID: 7, EntryID: 3}) {
		t.Fatalf("SourceOf = %v %v %v %v", o, p, ok, err)
	}
	if _, ok := findAct[ActMarkDelete](acts); ok {
		t.Fatalf("mark-delete before any receipt: %v", acts)
	}
	// With room in flight the next read is issued at once (pipelined).
	rd2 := mustAct[ActRead](t, acts)
	if rd2.From != (mtypes.Position{LedgerID: 7, EntryID: 7}) {
		t.Fatalf("next read from %v", rd2.From)
	}
	acts = m.Handle(EvReceipt{Now: t0, Gen: c.Gen, Source: mtypes.Position{LedgerID: 7, EntryID: 0}})
	if md := mustAct[ActMarkDelete](t, acts); md.Pos != (mtypes.Position{LedgerID: 7, EntryID: 2}) {
		t.Fatalf("mark-delete %v, want 7:2 (skips after 7:0 included)", md.Pos)
	}
	acts = m.Handle(EvMarkDeleteDone{Now: t0, Pos: mtypes.Position{LedgerID: 7, EntryID: 2}})
	acts = append(acts, m.Handle(EvReceipt{Now: t0, Gen: c.Gen, Source: mtypes.Position{LedgerID: 7, EntryID: 3}})...)
	if md := mustAct[ActMarkDelete](t, acts); md.Pos != (mtypes.Position{LedgerID: 7, EntryID: 6}) {
		t.Fatalf("mark-delete %v, want 7:6", md.Pos)
	}
	acts = m.Handle(EvReadDone{Now: t0, Epoch: rd2.Epoch})
	if w := mustAct[ActWaitForData](t, acts); w.From != (mtypes.Position{LedgerID: 7, EntryID: 7}) {
		t.Fatalf("wait from %v", w.From)
	}
	c2 := m.Counters()
	if c2.MsgOut != 2 || c2.Skipped[SkipReplicated] != 1 || c2.Skipped[SkipReplicateTo] != 2 || c2.Skipped[SkipMarker] != 2 {
		t.Fatalf("counters %+v", c2)
	}
}

func TestMachineBackoffDoublesToFiveSecondsAndNeverStops(t *testing.T) {
	m := NewMachine(cfgAB())
	acts := m.Handle(EvStart{Now: t0, MarkDelete: mtypes.Position{LedgerID: 1, EntryID: -1}})
	var delays []time.Duration
	now := t0
	for i := 0; i < 10; i++ {
		c := mustAct[ActConnect](t, acts)
		acts = m.Handle(EvConnectFailed{Now: now, Gen: c.Gen, Err: errors.New("connection refused")})
		tm := mustAct[ActSetTimer](t, acts)
		if tm.Kind != TimerReconnect {
			t.Fatalf("timer %v", tm)
		}
		delays = append(delays, tm.Delay)
		if m.Counters().LastError == "" || m.Phase() != PhaseBackoff {
			t.Fatalf("after failure: %+v", m.Counters())
		}
		now = now.Add(tm.Delay)
		acts = m.Handle(EvTimer{Now: now, Kind: TimerReconnect})
	}
	want := []time.Duration{100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000, 5000}
	for i := range want {
		want[i] *= time.Millisecond
	}
	if !slices.Equal(delays, want) {
		t.Fatalf("delays %v, want %v", delays, want)
	}
	// The remote comes back: connected, progress, and the next failure starts again at 100 ms.
	c := mustAct[ActConnect](t, acts)
	acts = m.Handle(EvConnected{Now: now, Gen: c.Gen})
	rd := mustAct[ActRead](t, acts)
	acts = m.Handle(EvReadDone{Now: now, Epoch: rd.Epoch, Entries: []mtypes.Entry{mkEntry(t, mtypes.Position{LedgerID: 1, EntryID: 0}, "x", nil)}})
	mustAct[ActSend](t, acts)
	m.Handle(EvReceipt{Now: now, Gen: c.Gen, Source: mtypes.Position{LedgerID: 1, EntryID: 0}})
	if m.Counters().LastError != "" {
		t.Fatalf("lastError not cleared after progress")
	}
	acts = m.Handle(EvSendFailed{Now: now, Gen: c.Gen, Err: errors.New("reset")})
	if tm := mustAct[ActSetTimer](t, acts); tm.Delay != 100*time.Millisecond {
		t.Fatalf("delay after progress %v", tm.Delay)
	}
	mustAct[ActCloseProducer](t, acts)
}

func TestMachineRewindsAndIgnoresStaleGenerations(t *testing.T) {
	m := NewMachine(cfgAB())
	c := mustAct[ActConnect](t, m.Handle(EvStart{Now: t0, MarkDelete: mtypes.Position{LedgerID: 1, EntryID: -1}}))
	rd := mustAct[ActRead](t, m.Handle(EvConnected{Now: t0, Gen: c.Gen}))
	var es []mtypes.Entry
	for i := range 5 {
		es = append(es, mkEntry(t, mtypes.Position{LedgerID: 1, EntryID: int64(i)}, fmt.Sprint(i), nil))
	}
	acts := m.Handle(EvReadDone{Now: t0, Epoch: rd.Epoch, Entries: es})
	if n := len(sends(acts)); n != 5 {
		t.Fatalf("%d sends", n)
	}
	m.Handle(EvReceipt{Now: t0, Gen: c.Gen, Source: mtypes.Position{LedgerID: 1, EntryID: 0}})
	m.Handle(EvMarkDeleteDone{Now: t0, Pos: mtypes.Position{LedgerID: 1, EntryID: 0}})
	m.Handle(EvReceipt{Now: t0, Gen: c.Gen, Source: mtypes.Position{LedgerID: 1, EntryID: 1}})
	acts = m.Handle(EvSendFailed{Now: t0, Gen: c.Gen, Err: errors.New("broken pipe")})
	mustAct[ActCloseProducer](t, acts)
	// Late receipts of the old producer change nothing.
	if acts := m.Handle(EvReceipt{Now: t0, Gen: c.Gen, Source: mtypes.Position{LedgerID: 1, EntryID: 2}}); len(acts) != 0 {
		t.Fatalf("stale receipt produced %v", acts)
	}
	acts = m.Handle(EvTimer{Now: t0, Kind: TimerReconnect})
	c2 := mustAct[ActConnect](t, acts)
	acts = m.Handle(EvConnected{Now: t0, Gen: c2.Gen})
	rd2 := mustAct[ActRead](t, acts)
	if rd2.From != (mtypes.Position{LedgerID: 1, EntryID: 2}) {
		t.Fatalf("after rewind read from %v, want 1:2 (first unacknowledged)", rd2.From)
	}
	// The read issued before the failure (old epoch) is dropped if it completes late.
	if acts := m.Handle(EvReadDone{Now: t0, Epoch: rd.Epoch, Entries: es}); len(acts) != 0 {
		t.Fatalf("stale read produced %v", acts)
	}
	// A receipt out of order is a failure, not a silent skip.
	acts = m.Handle(EvReadDone{Now: t0, Epoch: rd2.Epoch, Entries: es[2:]})
	if n := len(sends(acts)); n != 3 {
		t.Fatalf("%d sends after rewind", n)
	}
	acts = m.Handle(EvReceipt{Now: t0, Gen: c2.Gen, Source: mtypes.Position{LedgerID: 1, EntryID: 3}})
	mustAct[ActCloseProducer](t, acts)
	if m.Phase() != PhaseBackoff {
		t.Fatalf("phase %v", m.Phase())
	}
}

func TestMachineReceiptTimeout(t *testing.T) {
	m := NewMachine(cfgAB())
	c := mustAct[ActConnect](t, m.Handle(EvStart{Now: t0, MarkDelete: mtypes.Position{LedgerID: 1, EntryID: -1}}))
	rd := mustAct[ActRead](t, m.Handle(EvConnected{Now: t0, Gen: c.Gen}))
	m.Handle(EvReadDone{Now: t0, Epoch: rd.Epoch, Entries: []mtypes.Entry{mkEntry(t, mtypes.Position{LedgerID: 1, EntryID: 0}, "x", nil)}})
	if acts := m.Handle(EvTick{Now: t0.Add(29 * time.Second)}); len(acts) != 0 {
		t.Fatalf("early timeout %v", acts)
	}
	acts := m.Handle(EvTick{Now: t0.Add(30 * time.Second)})
	mustAct[ActCloseProducer](t, acts)
	mustAct[ActSetTimer](t, acts)
	if m.Counters().LastError == "" {
		t.Fatal("timeout not surfaced")
	}
}

func TestMachineInflightBound(t *testing.T) {
	cfg := cfgAB()
	cfg.MaxInflightEntries = 3
	cfg.ReadBatchEntries = 5
	m := NewMachine(cfg)
	c := mustAct[ActConnect](t, m.Handle(EvStart{Now: t0, MarkDelete: mtypes.Position{LedgerID: 1, EntryID: -1}}))
	rd := mustAct[ActRead](t, m.Handle(EvConnected{Now: t0, Gen: c.Gen}))
	if rd.MaxEntries != 5 {
		t.Fatalf("read batch %d", rd.MaxEntries)
	}
	var es []mtypes.Entry
	for i := range 5 {
		es = append(es, mkEntry(t, mtypes.Position{LedgerID: 1, EntryID: int64(i)}, "x", nil))
	}
	acts := m.Handle(EvReadDone{Now: t0, Epoch: rd.Epoch, Entries: es})
	if len(sends(acts)) != 3 {
		t.Fatal("want 3 sends")
	}
	// Two entries wait to be sent, less than a batch: the next batch is read now, so that it is
	// in hand when they are sent (a read from disk is a device round trip).
	rd2 := mustAct[ActRead](t, acts)
	if rd2.MaxEntries != 5 || rd2.From != (mtypes.Position{LedgerID: 1, EntryID: 5}) {
		t.Fatalf("read %+v", rd2)
	}
	es = nil
	for i := 5; i < 10; i++ {
		es = append(es, mkEntry(t, mtypes.Position{LedgerID: 1, EntryID: int64(i)}, "x", nil))
	}
	acts = m.Handle(EvReadDone{Now: t0, Epoch: rd2.Epoch, Entries: es})
	if len(sends(acts)) != 0 {
		t.Fatal("sent beyond the window")
	}
	if _, ok := findAct[ActRead](acts); ok {
		t.Fatal("read while a full batch waits to be sent")
	}
	// Each receipt sends the next entry already read; the next batch is read (ahead of the full
	// window) once less than a batch waits.
	acts = m.Handle(EvReceipt{Now: t0, Gen: c.Gen, Source: mtypes.Position{LedgerID: 1, EntryID: 0}})
	if s := sends(acts); len(s) != 1 || s[0].Out.Source != (mtypes.Position{LedgerID: 1, EntryID: 3}) {
		t.Fatalf("sends %+v", s)
	}
	if _, ok := findAct[ActRead](acts); ok {
		t.Fatal("read while a full batch waits to be sent")
	}
	acts = m.Handle(EvReceipt{Now: t0, Gen: c.Gen, Source: mtypes.Position{LedgerID: 1, EntryID: 1}})
	if s := sends(acts); len(s) != 1 || s[0].Out.Source != (mtypes.Position{LedgerID: 1, EntryID: 4}) {
		t.Fatalf("sends %+v", s)
	}
	if _, ok := findAct[ActRead](acts); ok {
		t.Fatal("read while a full batch waits to be sent")
	}
	acts = m.Handle(EvReceipt{Now: t0, Gen: c.Gen, Source: mtypes.Position{LedgerID: 1, EntryID: 2}})
	if s := sends(acts); len(s) != 1 || s[0].Out.Source != (mtypes.Position{LedgerID: 1, EntryID: 5}) {
		t.Fatalf("sends %+v", s)
	}
	if rd := mustAct[ActRead](t, acts); rd.MaxEntries != 5 || rd.From != (mtypes.Position{LedgerID: 1, EntryID: 10}) {
		t.Fatalf("read %+v", rd)
	}
	if c := m.Counters(); c.Inflight != 3 {
		t.Fatalf("in flight %d", c.Inflight)
	}
}

// TestMachineNoReadAheadAtTheTail: reads that come back short (the end of the log) do not make
// the machine read again while entries wait for room in the window: a live stream behind a full
// window would otherwise cost a read per new entry.
func TestMachineNoReadAheadAtTheTail(t *testing.T) {
	cfg := cfgAB()
	cfg.MaxInflightEntries = 3
	cfg.ReadBatchEntries = 5
	m := NewMachine(cfg)
	c := mustAct[ActConnect](t, m.Handle(EvStart{Now: t0, MarkDelete: mtypes.Position{LedgerID: 1, EntryID: -1}}))
	rd := mustAct[ActRead](t, m.Handle(EvConnected{Now: t0, Gen: c.Gen}))
	read := func(from, n int64) []Action {
		var es []mtypes.Entry
		for i := from; i < from+n; i++ {
			es = append(es, mkEntry(t, mtypes.Position{LedgerID: 1, EntryID: i}, "x", nil))
		}
		return m.Handle(EvReadDone{Now: t0, Epoch: rd.Epoch, Entries: es})
	}
	acts := read(0, 2) // short: all sent, so the next read goes at once
	if len(sends(acts)) != 2 {
		t.Fatal("want 2 sends")
	}
	rd = mustAct[ActRead](t, acts)
	acts = read(2, 2) // short again: one fits the window, one waits
	if len(sends(acts)) != 1 {
		t.Fatal("want 1 send")
	}
	if _, ok := findAct[ActRead](acts); ok {
		t.Fatal("read again at the tail while an entry waits for the window")
	}
	acts = m.Handle(EvReceipt{Now: t0, Gen: c.Gen, Source: mtypes.Position{LedgerID: 1, EntryID: 0}})
	if s := sends(acts); len(s) != 1 || s[0].Out.Source != (mtypes.Position{LedgerID: 1, EntryID: 3}) {
		t.Fatalf("sends %+v", s)
	}
	if rd := mustAct[ActRead](t, acts); rd.From != (mtypes.Position{LedgerID: 1, EntryID: 4}) {
		t.Fatalf("read %+v", rd)
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

func TestMachineMarkDeleteFailureRetries(t *testing.T) {
	m := NewMachine(cfgAB())
	c := mustAct[ActConnect](t, m.Handle(EvStart{Now: t0, MarkDelete: mtypes.Position{LedgerID: 1, EntryID: -1}}))
	rd := mustAct[ActRead](t, m.Handle(EvConnected{Now: t0, Gen: c.Gen}))
	m.Handle(EvReadDone{Now: t0, Epoch: rd.Epoch, Entries: []mtypes.Entry{mkEntry(t, mtypes.Position{LedgerID: 1, EntryID: 0}, "x", nil), mkEntry(t, mtypes.Position{LedgerID: 1, EntryID: 1}, "y", nil)}})
	acts := m.Handle(EvReceipt{Now: t0, Gen: c.Gen, Source: mtypes.Position{LedgerID: 1, EntryID: 0}})
	mustAct[ActMarkDelete](t, acts)
	// A second receipt while the first mark-delete is busy queues the newest position.
	if _, ok := findAct[ActMarkDelete](m.Handle(EvReceipt{Now: t0, Gen: c.Gen, Source: mtypes.Position{LedgerID: 1, EntryID: 1}})); ok {
		t.Fatal("two mark-deletes at once")
	}
	acts = m.Handle(EvMarkDeleteDone{Now: t0, Pos: mtypes.Position{LedgerID: 1, EntryID: 0}, Err: errors.New("disk full")})
	if tm := mustAct[ActSetTimer](t, acts); tm.Kind != TimerMarkDelete {
		t.Fatalf("timer %v", tm)
	}
	if m.Counters().LastError == "" {
		t.Fatal("mark-delete failure not surfaced")
	}
	acts = m.Handle(EvTimer{Now: t0, Kind: TimerMarkDelete})
	if md := mustAct[ActMarkDelete](t, acts); md.Pos != (mtypes.Position{LedgerID: 1, EntryID: 1}) {
		t.Fatalf("retry mark-delete %v", md.Pos)
	}
}

func TestMachineReadErrorRetries(t *testing.T) {
	m := NewMachine(cfgAB())
	c := mustAct[ActConnect](t, m.Handle(EvStart{Now: t0, MarkDelete: mtypes.Position{LedgerID: 1, EntryID: -1}}))
	rd := mustAct[ActRead](t, m.Handle(EvConnected{Now: t0, Gen: c.Gen}))
	acts := m.Handle(EvReadDone{Now: t0, Epoch: rd.Epoch, Err: errors.New("io error")})
	if tm := mustAct[ActSetTimer](t, acts); tm.Kind != TimerRead || tm.Delay != 100*time.Millisecond {
		t.Fatalf("timer %v", tm)
	}
	if m.Counters().LastError == "" {
		t.Fatal("read error not surfaced")
	}
	acts = m.Handle(EvTimer{Now: t0, Kind: TimerRead})
	if rd2 := mustAct[ActRead](t, acts); rd2.From != rd.From {
		t.Fatalf("retry read from %v", rd2.From)
	}
}

func TestMachineCorruptEntryIsSkippedLoudly(t *testing.T) {
	m := NewMachine(cfgAB())
	c := mustAct[ActConnect](t, m.Handle(EvStart{Now: t0, MarkDelete: mtypes.Position{LedgerID: 1, EntryID: -1}}))
	rd := mustAct[ActRead](t, m.Handle(EvConnected{Now: t0, Gen: c.Gen}))
	bad := mkEntry(t, mtypes.Position{LedgerID: 1, EntryID: 0}, "x", nil)
	bad.Data = slices.Clone(bad.Data)
	bad.Data[len(bad.Data)-1] ^= 0xff // checksum mismatch
	acts := m.Handle(EvReadDone{Now: t0, Epoch: rd.Epoch, Entries: []mtypes.Entry{bad}})
	if md := mustAct[ActMarkDelete](t, acts); md.Pos != (mtypes.Position{LedgerID: 1, EntryID: 0}) {
		t.Fatalf("mark-delete %v", md)
	}
	cs := m.Counters()
	if cs.Skipped[SkipCorrupt] != 1 || cs.LastError == "" {
		t.Fatalf("counters %+v", cs)
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

// TestMachineSimulation runs the machine against a simulated world with random failures (connect
// refusals, dropped connections, lost receipts, failing reads and mark-deletes) and checks that
// every entry not meant to be skipped reaches the remote exactly once after dedup, in order, and
// that the machine is never left without something pending (no silent stop).
// Receipts handled as one EvReceipts give exactly what one EvReceipt each gives; a wrong one in a
// batch fails the producer and the rest of the batch is ignored.
func TestMachineReceiptsBatch(t *testing.T) {
	run := func(batched bool, sources []mtypes.Position) (*Machine, []Action) {
		m := NewMachine(cfgAB())
		c := mustAct[ActConnect](t, m.Handle(EvStart{Now: t0, MarkDelete: mtypes.Position{LedgerID: 7, EntryID: -1}}))
		rd := mustAct[ActRead](t, m.Handle(EvConnected{Now: t0, Gen: c.Gen}))
		var es []mtypes.Entry
		for i := range 6 {
			es = append(es, mkEntry(t, mtypes.Position{LedgerID: 7, EntryID: int64(i)}, fmt.Sprint(i), nil))
		}
		m.Handle(EvReadDone{Now: t0, Epoch: rd.Epoch, Entries: es})
		if batched {
			return m, m.Handle(EvReceipts{Now: t0, Gen: c.Gen, Sources: sources})
		}
		var acts []Action
		for _, s := range sources {
			acts = append(acts, m.Handle(EvReceipt{Now: t0, Gen: c.Gen, Source: s})...)
		}
		return m, acts
	}
	in := []mtypes.Position{{LedgerID: 7, EntryID: 0}, {LedgerID: 7, EntryID: 1}, {LedgerID: 7, EntryID: 2}, {LedgerID: 7, EntryID: 3}}
	one, _ := run(false, in)
	many, acts := run(true, in)
	if a, b := one.Counters(), many.Counters(); a.MsgOut != 4 || b.MsgOut != 4 || a.Inflight != b.Inflight || b.Inflight != 2 {
		t.Fatalf("one by one %+v, batched %+v", a, b)
	}
	if md := mustAct[ActMarkDelete](t, acts); md.Pos != (mtypes.Position{LedgerID: 7, EntryID: 3}) {
		t.Fatalf("batched mark-delete %v", md.Pos)
	}
	bad, acts := run(true, []mtypes.Position{{LedgerID: 7, EntryID: 0}, {LedgerID: 7, EntryID: 2}, {LedgerID: 7, EntryID: 1}})
	if bad.Phase() != PhaseBackoff || bad.Counters().MsgOut != 1 || !strings.Contains(bad.Counters().LastError, "out of order") {
		t.Fatalf("out-of-order batch: phase %v counters %+v", bad.Phase(), bad.Counters())
	}
	mustAct[ActCloseProducer](t, acts)
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
