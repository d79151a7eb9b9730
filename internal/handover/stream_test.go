package handover

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"
)

func sample() Header {
	return Header{From: "b1", Bundle: "public/default/0x00000000_0x40000000", Topic: "persistent://public/default/t",
		Segments: []Segment{{ID: 10, Incarnation: 7, Entries: 3}, {ID: 12, Incarnation: 9, Entries: 2}},
		Cursors:  [][]byte{[]byte("c1"), {0, 1, 2}}}
}

func write(t testing.TB, h Header, entries int) []byte {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, h, 1024)
	if err != nil {
		t.Fatal(err)
	}
	for i := range entries {
		if err := w.WriteEntry([]byte(fmt.Sprintf("entry-%d", i)), int64(1000+i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	b := write(t, sample(), 5)
	r, err := NewReader(bytes.NewReader(b), 1024)
	if err != nil {
		t.Fatal(err)
	}
	if h := r.Header(); h.Topic != sample().Topic || len(h.Cursors) != 2 || !bytes.Equal(h.Cursors[1], []byte{0, 1, 2}) {
		t.Fatalf("header = %+v", h)
	}
	want := [][2]int64{{10, 0}, {10, 1}, {10, 2}, {12, 0}, {12, 1}}
	for i, w := range want {
		e, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if e.LedgerID != w[0] || e.EntryID != w[1] || string(e.Data) != fmt.Sprintf("entry-%d", i) || e.PublishTime != int64(1000+i) {
			t.Fatalf("entry %d = %d:%d %q %d", i, e.LedgerID, e.EntryID, e.Data, e.PublishTime)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("after the last entry: %v", err)
	}
}

func TestWriterEnforcesTheReadersBounds(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, sample(), 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteEntry([]byte("too long"), 0); err == nil {
		t.Fatal("an entry over the bound was written")
	}
	if err := w.Close(); err == nil {
		t.Fatal("a stream short of its entries closed")
	}
	bad := sample()
	bad.Segments[1].ID = 5
	if _, err := NewWriter(&buf, bad, 4); !errors.Is(err, ErrMalformed) {
		t.Fatalf("segments out of order = %v", err)
	}
}

func TestReaderRefusesDamage(t *testing.T) {
	good := write(t, sample(), 5)
	readAll := func(b []byte) error {
		r, err := NewReader(bytes.NewReader(b), 1024)
		if err != nil {
			return err
		}
		for {
			if _, err := r.Next(); err == io.EOF {
				return nil
			} else if err != nil {
				return err
			}
		}
	}
	flip := append([]byte(nil), good...)
	flip[len(flip)-1] ^= 1
	for name, b := range map[string][]byte{
		"truncated":   good[:len(good)-3],
		"trailing":    append(append([]byte(nil), good...), 0),
		"bit flip":    flip,
		"bad magic":   append([]byte("XXXX"), good[4:]...),
		"bad version": append(append([]byte(nil), good[:4]...), append([]byte{9}, good[5:]...)...),
		"empty":       nil,
	} {
		if err := readAll(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	if err := readAll(good); err != nil {
		t.Fatal(err)
	}
	// An entry over the reader's bound is refused before its data is read.
	r, err := NewReader(bytes.NewReader(good), 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Next(); !errors.Is(err, ErrMalformed) {
		t.Fatalf("an entry over the bound = %v", err)
	}
}

func FuzzReader(f *testing.F) {
	f.Add(write(f, sample(), 5))
	f.Add([]byte("MHOV\x01\x00\x00\x00\x02{}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := NewReader(bytes.NewReader(b), 64)
		if err != nil {
			return
		}
		var last [2]int64
		for i := 0; ; i++ {
			e, err := r.Next()
			if err != nil {
				return
			}
			if len(e.Data) > 64 {
				t.Fatalf("entry of %d bytes passed a 64-byte bound", len(e.Data))
			}
			if i > 0 && (e.LedgerID < last[0] || e.LedgerID == last[0] && e.EntryID <= last[1]) {
				t.Fatalf("positions went back: %v then %d:%d", last, e.LedgerID, e.EntryID)
			}
			last = [2]int64{e.LedgerID, e.EntryID}
		}
	})
}
