package replication

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/wire"
)

// snapshotTraffic feeds x (over topic) with rounds of perRound replicated entries from two
// origins, interleaved at random and with local entries at random in between (most entries a run
// of their own), and saves after each round (one snapshot interval). It returns the bytes passed
// to SetProperties per save, in order.
func snapshotTraffic(t testing.TB, x *Index, topic *memTopic, rounds, perRound int) []int64 {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	var seq [2]int64
	origins := [2]string{"a", "b"}
	perSave := make([]int64, 0, rounds)
	for range rounds {
		for range perRound {
			if rng.IntN(3) == 0 {
				topic.append(nil, 1) // a local entry
			}
			o := rng.IntN(2)
			pos := mtypes.Position{LedgerID: 100 + int64(o), EntryID: seq[o]}
			seq[o]++
			src := wire.ReplicatedOrigin{From: []byte(origins[o]), HasFrom: true, Position: []byte(pos.String()), HasPosition: true}
			dup, _, _, ticket, err := x.AdmitOriginTicket(nil, src)
			if err != nil || dup || ticket == 0 {
				t.Fatalf("admit %s %v: dup %v ticket %d err %v", origins[o], pos, dup, ticket, err)
			}
			local := topic.append(nil, 1)
			x.Commit(ticket, local.LedgerID, local.EntryID, nil)
		}
		before := topic.propBytes
		if err := x.Save(ctx); err != nil {
			t.Fatal(err)
		}
		perSave = append(perSave, topic.propBytes-before)
	}
	return perSave
}

// TestIndexSnapshotBytesPerSave: with interleaved traffic (every replicated entry a run of its
// own) a save writes what changed since the last one, plus a bounded share of merging, not the
// whole index.
func TestIndexSnapshotBytesPerSave(t *testing.T) {
	for _, perRound := range []int{500, 5000} {
		topic := newMemTopic("persistent://t/n/bytes", 7)
		x, err := LoadIndex(context.Background(), topic, IndexOptions{SnapshotInterval: time.Hour, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		rounds := 120
		perSave := snapshotTraffic(t, x, topic, rounds, perRound)
		var sum, peak int64
		for _, n := range perSave[rounds/2:] {
			sum += n
			peak = max(peak, n)
		}
		avg := sum / int64(rounds-rounds/2)
		t.Logf("%d replicated entries per save: %d bytes per save on average over the last %d saves, at most %d", perRound, avg, rounds-rounds/2, peak)
		if limit := int64(perRound) * 16; avg > limit {
			t.Errorf("%d entries per save: %d bytes per save on average, want at most %d (16 per new entry)", perRound, avg, limit)
		}
		if err := x.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}
