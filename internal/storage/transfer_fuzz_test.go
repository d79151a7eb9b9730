package storage

import (
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// splitFuzzRecords cuts b into records, each preceded by its length (u16): the fuzzer controls
// the number of records and their contents.
func splitFuzzRecords(b []byte) [][]byte {
	var recs [][]byte
	for len(b) >= 2 {
		n := min(int(binary.LittleEndian.Uint16(b)), len(b)-2)
		recs = append(recs, b[2:2+n])
		b = b[2+n:]
	}
	return recs
}

// joinFuzzRecords is the inverse of splitFuzzRecords (for seeds).
func joinFuzzRecords(recs ...[]byte) []byte {
	var b []byte
	for _, r := range recs {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(r)))
		b = append(b, r...)
	}
	return b
}

// FuzzImportCursorRecords: cursor records from another engine (LedgerImport.SetCursors) are
// refused with an error, never a panic; the ones accepted are read back by the cursor log's
// reader as the same states, one per cursor.
func FuzzImportCursorRecords(f *testing.F) {
	st := &cursorState{name: "sub", markDelete: mtypes.Position{LedgerID: 3, EntryID: 7}, props: map[string]string{"k": "v"}}
	st.ack(mtypes.Position{LedgerID: 3, EntryID: 9})
	st.ack(mtypes.Position{LedgerID: 5, EntryID: 0})
	_, _ = st.ackBatch(mtypes.Position{LedgerID: 3, EntryID: 12}, 10, []int{1, 3})
	other := &cursorState{name: "pulsar.repl.west", markDelete: mtypes.Position{LedgerID: 9, EntryID: -1}}
	a, b := encodeCursorState([]byte{cState}, st), encodeCursorState([]byte{cState}, other)
	f.Add(joinFuzzRecords(a, b))
	f.Add(joinFuzzRecords(a, a))
	f.Add(joinFuzzRecords(a[:len(a)-2]))
	f.Add(joinFuzzRecords(append([]byte{cDelete}, "sub"...)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		recs := splitFuzzRecords(in)
		if err := validateImportedCursors(recs); err != nil {
			return
		}
		// What the import writes as cursors.log, read as a load reads it.
		log := appendHeader(nil, magicCursors, 0)
		want := map[string]*cursorState{}
		for _, r := range recs {
			log = appendPlainRecord(log, r)
			st, err := decodeCursorState(r[1:])
			if err != nil {
				t.Fatalf("accepted record does not decode: %v", err)
			}
			want[st.name] = st
		}
		scan := scanCursorLog(log)
		if scan.headerErr != nil || scan.bad >= 0 || len(scan.prefix) != len(recs) {
			t.Fatalf("the cursor log reader does not take the accepted records: %+v", scan)
		}
		got := map[string]*cursorState{}
		applyCursorRecords(got, scan.prefix)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("cursor log read back %d states, want %d", len(got), len(want))
		}
		for name, s := range got {
			again, err := decodeCursorState(encodeCursorState(nil, s))
			if err != nil || !reflect.DeepEqual(again, s) {
				t.Fatalf("cursor %q does not re-encode: %v", name, err)
			}
		}
	})
}
