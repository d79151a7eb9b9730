package storage

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// TestSealJournalRecordsCombined: sealing by combining the segment record's CRC gives the same
// checksums as a pass over every record (what replay verifies).
func TestSealJournalRecordsCombined(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var buf []byte
	for i := 0; i < 200; i++ {
		var start int
		if rng.IntN(4) == 0 {
			buf, start = beginJournalRecord(buf, jAnnounce, uint32(i))
			buf = append(buf, "some-ledger"...)
		} else {
			data := make([]byte, rng.IntN(20000))
			for j := range data {
				data[j] = byte(rng.Uint32())
			}
			buf, start = beginJournalRecord(buf, jEntry, uint32(i))
			buf = binary.LittleEndian.AppendUint64(buf, uint64(rng.Int64()))
			buf = appendSegRecord(buf, int64(i), rng.Int64(), data)
		}
		finishJournalRecord(buf, start)
	}
	seed := journalSeed(77)
	sealJournalRecords(buf, seed)
	n := 0
	for off := 0; off < len(buf); n++ {
		_, sz, err := decodeRecord(buf[off:], seed)
		if err != nil {
			t.Fatalf("record %d at %d: %v", n, off, err)
		}
		off += sz
	}
	if n != 200 {
		t.Fatalf("%d records", n)
	}
}
