package replication

import (
	"fmt"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/wire"
)

func benchEntry(b *testing.B, size int) mtypes.Entry {
	payload := make([]byte, size)
	return mkEntry(b, mtypes.Position{LedgerID: 5, EntryID: 1}, string(payload), nil)
}

// BenchmarkPrepareEntry: decode metadata, set replicated_from and the source position, re-encode,
// checksum (per entry sent).
func BenchmarkPrepareEntry(b *testing.B) {
	for _, size := range []int{100, 1024, 64 << 10} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			e := benchEntry(b, size)
			b.SetBytes(int64(len(e.Data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := PrepareEntry(e, "a", "b"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMachineEntry: state-machine cost per replicated 1 KiB entry (read batch of 400, send,
// receipt, mark-delete), including PrepareEntry.
func BenchmarkMachineEntry(b *testing.B) {
	e := benchEntry(b, 1024)
	m := NewMachine(MachineConfig{Local: "a", Remote: "b"})
	acts := m.Handle(EvStart{Now: t0, MarkDelete: mtypes.Position{LedgerID: 1, EntryID: -1}})
	c := acts[0].(ActConnect)
	acts = m.Handle(EvConnected{Now: t0, Gen: c.Gen})
	next := int64(0)
	b.ReportAllocs()
	b.SetBytes(int64(len(e.Data)))
	done := 0
	for b.Loop() {
		for done == 0 {
			var queue []Event
			for _, a := range acts {
				switch a := a.(type) {
				case ActRead:
					es := make([]mtypes.Entry, a.MaxEntries)
					for i := range es {
						es[i] = mtypes.Entry{Position: mtypes.Position{LedgerID: 1, EntryID: next}, Data: e.Data}
						next++
					}
					queue = append(queue, EvReadDone{Now: t0, Epoch: a.Epoch, Entries: es})
				case ActSend:
					queue = append(queue, EvReceipt{Now: t0, Gen: a.Gen, Source: a.Out.Source})
					done++
				case ActSends:
					for _, o := range a.Outs {
						queue = append(queue, EvReceipt{Now: t0, Gen: a.Gen, Source: o.Source})
						done++
					}
				case ActMarkDelete:
					queue = append(queue, EvMarkDeleteDone{Now: t0, Pos: a.Pos})
				}
			}
			acts = acts[:0]
			for _, ev := range queue {
				acts = append(acts, m.Handle(ev)...)
			}
		}
		done--
	}
}

// BenchmarkIndexAdmit: receiving-side dedup check + record per replicated entry (one origin, runs).
func BenchmarkIndexAdmit(b *testing.B) {
	x := NewIndex(IndexOptions{})
	datas := make([][]byte, 1000)
	for i := range datas {
		datas[i] = replicated(b, "a", mtypes.Position{LedgerID: 1, EntryID: int64(i)}, "x")
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		// Distinct origin positions: rewrite the ledger id per round so every admit is new.
		d := datas[i%len(datas)]
		dup, _, _, commit, err := x.Admit(d)
		if err != nil {
			b.Fatal(err)
		}
		if !dup {
			commit(2, int64(i), nil)
		}
		i++
	}
	_ = time.Second
}

// BenchmarkIndexAdmitCommit: the broker's per-entry work in the index for a new replicated entry
// (every position fresh, one origin): AdmitTicket before the append, Commit at its completion.
// "closure" is the same through Admit's commit function (the API before tickets).
func BenchmarkIndexAdmitCommit(b *testing.B) {
	const perLedger, ledgers = 1000, 64
	datas := make([][]byte, 0, perLedger*ledgers)
	for l := range ledgers {
		for e := range perLedger {
			datas = append(datas, replicated(b, "a", mtypes.Position{LedgerID: int64(l + 1), EntryID: int64(e)}, "x"))
		}
	}
	run := func(b *testing.B, admit func(x *Index, d []byte, local int64)) {
		b.ReportAllocs()
		var x *Index
		i := 0
		for b.Loop() {
			if i%len(datas) == 0 {
				x = NewIndex(IndexOptions{}) // every position is new again
			}
			admit(x, datas[i%len(datas)], int64(i))
			i++
		}
	}
	b.Run("ticket", func(b *testing.B) {
		run(b, func(x *Index, d []byte, local int64) {
			dup, _, _, ticket, err := x.AdmitTicket(d)
			if err != nil || dup || ticket == 0 {
				b.Fatal(dup, ticket, err)
			}
			x.Commit(ticket, 2, local, nil)
		})
	})
	b.Run("ticket-window", func(b *testing.B) {
		// As the broker does: commits trail admissions by a window of appends in flight.
		const window = 1000
		var ring [window]uint64
		n := 0
		var cur *Index
		run(b, func(x *Index, d []byte, local int64) {
			if x != cur { // a new index: the old one's tickets are dropped
				cur, n = x, 0
			}
			if n >= window {
				x.Commit(ring[n%window], 2, local-window, nil)
			}
			dup, _, _, ticket, err := x.AdmitTicket(d)
			if err != nil || dup || ticket == 0 {
				b.Fatal(dup, ticket, err)
			}
			ring[n%window] = ticket
			n++
		})
	})
	b.Run("closure", func(b *testing.B) {
		run(b, func(x *Index, d []byte, local int64) {
			dup, _, _, commit, err := x.Admit(d)
			if err != nil || dup || commit == nil {
				b.Fatal(dup, err)
			}
			commit(2, local, nil)
		})
	})
}

// BenchmarkIndexRecordInterleaved: the per-entry cost of a new replicated entry (AdmitOriginTicket
// and Commit, as the broker calls them) in an index that already recorded n entries of two
// interleaved origins, every entry a run of its own: beyond the memory bound (MaxRuns per origin
// cluster) the oldest runs are forgotten a block at a time, so the cost stays flat in n.
func BenchmarkIndexRecordInterleaved(b *testing.B) {
	for _, n := range []int{1_000_000, 3_000_000, 10_000_000} {
		b.Run(fmt.Sprintf("entries=%dM", n/1_000_000), func(b *testing.B) {
			x := NewIndex(IndexOptions{Logger: quietLogger()})
			var seq [2]int64
			local := int64(0)
			var posBuf [48]byte
			origins := [2][]byte{[]byte("a"), []byte("b")}
			add := func(i int) {
				o := i & 1
				pos := mtypes.Position{LedgerID: 1, EntryID: seq[o]}.AppendTo(posBuf[:0])
				seq[o]++
				_, _, _, ticket, err := x.AdmitOriginTicket(nil, wire.ReplicatedOrigin{From: origins[o], HasFrom: true, Position: pos, HasPosition: true})
				if err != nil || ticket == 0 {
					b.Fatal(ticket, err)
				}
				x.Commit(ticket, 9, local, nil)
				local++
			}
			for i := range n {
				add(i)
			}
			b.ReportAllocs()
			i := n
			for b.Loop() {
				add(i)
				i++
			}
		})
	}
}
