package broker

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// FuzzDispatchState drives a dispatch state machine with random event transcripts (consumers
// joining and leaving, permits, reads, acks, redeliveries, rewinds, seeks) over a log of 64
// entries, and checks its invariants after every step:
//   - a pending entry is owned by exactly the consumer that has it pending;
//   - unacked counters equal the pending messages;
//   - the replay set is sorted, unique and holds no pending entry;
//   - nothing acknowledged is ever delivered again.
func FuzzDispatchState(f *testing.F) {
	f.Add([]byte{0, 1, 2, 10, 3, 3, 5, 7, 1, 4, 9, 3})
	f.Add([]byte{0, 0, 0, 1, 1, 2, 50, 3, 3, 3, 6, 0, 3, 8, 3, 11, 3})
	f.Add([]byte{12, 0, 0, 2, 9, 3, 4, 1, 3, 5, 2, 3, 10, 3})
	f.Fuzz(runDispatchTranscript)
}

// TestDispatchRandomTranscripts runs the fuzz body on pseudo-random transcripts (deterministic seed).
func TestDispatchRandomTranscripts(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 3000; i++ {
		ops := make([]byte, 1+rng.IntN(300))
		for j := range ops {
			ops[j] = byte(rng.UintN(256))
		}
		runDispatchTranscript(t, ops)
	}
}

func runDispatchTranscript(t *testing.T, ops []byte) {
	{
		if len(ops) > 400 {
			ops = ops[:400]
		}
		subType := mtypes.SubType(0)
		if len(ops) > 0 {
			subType = mtypes.SubType(ops[0] % 4)
			ops = ops[1:]
		}
		const logSize = 64
		var log []entryInfo
		for i := int64(0); i < logSize; i++ {
			e := entryInfo{pos: pos(1, i), numMessages: 1 + int(i%3), keyHash: uint32(i*7919) % 65536, marker: i%17 == 16}
			if k := i % 8; k < 3 && !e.marker {
				// Chunked messages of three chunks; every other one never gets its last chunk.
				e.chunkUUID = fmt.Sprint("m", i/8)
				e.lastChunk = k == 2 && (i/8)%2 == 0
			}
			log = append(log, e)
		}
		d := newDispatchState(subType, -1, pos(1, 0))
		d.maxUnacked = 20
		markDelete := pos(1, -1)
		acked := map[mtypes.Position]bool{}
		var consumers []*dconsumer
		seq := uint64(0)
		arg := func(i int) int {
			if i < len(ops) {
				return int(ops[i])
			}
			return 0
		}
		for i := 0; i < len(ops); i++ {
			switch ops[i] % 13 {
			case 0, 1: // join
				if subType == mtypes.SubExclusive && len(consumers) > 0 {
					continue
				}
				seq++
				c := newDConsumer(seq, fmt.Sprint("c", arg(i+1)%5), int32(arg(i+1)%2))
				consumers = append(consumers, c)
				d.addConsumer(c, markDelete)
			case 2: // leave
				if len(consumers) == 0 {
					continue
				}
				k := arg(i+1) % len(consumers)
				d.removeConsumer(consumers[k], markDelete)
				consumers = slices.Delete(consumers, k, k+1)
			case 3, 4, 5: // dispatcher pass
				p, ok := d.plan(1+arg(i+1)%10, pos(1, logSize-1), false, false)
				if !ok {
					continue
				}
				var es []entryInfo
				if p.seq {
					for j := p.from.EntryID; j < logSize && len(es) < p.max; j++ {
						if j >= 0 {
							es = append(es, log[j])
						}
					}
				} else {
					for _, q := range p.replay {
						es = append(es, log[q.EntryID])
					}
				}
				res := d.assign(p, es, func(q mtypes.Position) bool { return acked[q] }, 0)
				for _, dl := range res.deliveries {
					if acked[dl.d.Position] {
						t.Fatalf("acknowledged entry %v delivered again", dl.d.Position)
					}
				}
				for _, m := range res.markers {
					acked[m] = true
					d.acked(m)
				}
			case 6, 7: // flow
				if len(consumers) > 0 {
					d.flow(consumers[arg(i+1)%len(consumers)], uint32(arg(i+2)%20))
				}
			case 8: // individual ack of one pending entry
				for q, c := range d.owner {
					_ = c
					acked[q] = true
					d.acked(q)
					break
				}
			case 9: // cumulative ack
				upTo := pos(1, int64(arg(i+1)%logSize))
				if upTo.Compare(markDelete) > 0 && subType != mtypes.SubShared && subType != mtypes.SubKeyShared {
					for j := markDelete.EntryID + 1; j <= upTo.EntryID; j++ {
						acked[pos(1, j)] = true
					}
					markDelete = upTo
					d.ackedUpTo(upTo)
				}
			case 10: // redeliver
				if len(consumers) > 0 {
					c := consumers[arg(i+1)%len(consumers)]
					if d.singleActive() {
						d.rewind(markDelete)
					} else {
						d.redeliverPending(c, nil)
					}
				}
			case 11: // seek
				to := pos(1, int64(arg(i+1)%logSize))
				markDelete = pos(1, to.EntryID-1)
				clear(acked)
				for j := int64(0); j < to.EntryID; j++ {
					acked[pos(1, j)] = true
				}
				d.reset(to)
			case 12: // markDelete refresh (Key_Shared joins)
				d.markDelete = markDelete
			}
			checkDispatchInvariants(t, d, consumers)
		}
	}
}

func checkDispatchInvariants(t *testing.T, d *dispatchState, consumers []*dconsumer) {
	t.Helper()
	owned := 0
	for _, c := range consumers {
		var sum int64
		for q, pe := range c.pending {
			if d.owner[q] != c {
				t.Fatalf("%v pending at %s but owned by %v", q, c.name, d.owner[q])
			}
			if pe.left < 0 || pe.left > pe.total {
				t.Fatalf("pending entry %v: %+v", q, pe)
			}
			sum += int64(pe.left)
		}
		if sum != c.unacked {
			t.Fatalf("%s unacked %d, pending messages %d", c.name, c.unacked, sum)
		}
		owned += len(c.pending)
	}
	if owned != len(d.owner) {
		t.Fatalf("owner map has %d entries, consumers hold %d", len(d.owner), owned)
	}
	// Chunk routes live exactly as long as chunks of their message are pending at their consumer.
	counted := map[string]int{}
	for q, uuid := range d.chunkOf {
		c := d.owner[q]
		if c == nil {
			t.Fatalf("chunk %v of %s is not pending", q, uuid)
		}
		if r := d.chunkOwner[uuid]; r != nil && r.to == c {
			counted[uuid]++
		}
	}
	for uuid, r := range d.chunkOwner {
		if r.pending <= 0 || counted[uuid] != r.pending {
			t.Fatalf("route of %s counts %d pending chunks, %d are", uuid, r.pending, counted[uuid])
		}
	}
	if !slices.IsSortedFunc(d.replay, mtypes.Position.Compare) {
		t.Fatalf("replay not sorted: %v", d.replay)
	}
	for i, q := range d.replay {
		if i > 0 && d.replay[i-1] == q {
			t.Fatalf("replay duplicate %v", q)
		}
		if d.owner[q] != nil {
			t.Fatalf("replay entry %v is pending", q)
		}
	}
}
