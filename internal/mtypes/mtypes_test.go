package mtypes_test

import (
	"math"
	"testing"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// The enums' values and names are the protocol's, so the server converts with a type conversion.
func TestEnumsMatchProtocol(t *testing.T) {
	for v, name := range pulsarpb.CommandSubscribe_SubType_name {
		if got := mtypes.SubType(v).String(); got != name || !mtypes.SubType(v).Valid() {
			t.Errorf("SubType(%d) = %s (valid %v), protocol %s", v, got, mtypes.SubType(v).Valid(), name)
		}
	}
	if len(pulsarpb.CommandSubscribe_SubType_name) != 4 || mtypes.SubType(4).Valid() || mtypes.SubType(-1).Valid() {
		t.Error("subscription types differ from the protocol's four")
	}
	for v, name := range pulsarpb.ProducerAccessMode_name {
		if got := mtypes.AccessMode(v).String(); got != name {
			t.Errorf("AccessMode(%d) = %s, protocol %s", v, got, name)
		}
	}
	if mtypes.InitialLatest != mtypes.InitialPosition(pulsarpb.CommandSubscribe_Latest) ||
		mtypes.InitialEarliest != mtypes.InitialPosition(pulsarpb.CommandSubscribe_Earliest) {
		t.Error("initial positions differ from the protocol's")
	}
	if mtypes.KeySharedAutoSplit != mtypes.KeySharedMode(pulsarpb.KeySharedMode_AUTO_SPLIT) ||
		mtypes.KeySharedSticky != mtypes.KeySharedMode(pulsarpb.KeySharedMode_STICKY) {
		t.Error("key-shared modes differ from the protocol's")
	}
}

// The wire's sentinels (uint64 all ones and 2^63-1, reinterpreted) are Earliest and Latest.
func TestSentinels(t *testing.T) {
	allOnes := uint64(math.MaxUint64)
	if (mtypes.Position{LedgerID: int64(allOnes), EntryID: int64(allOnes)}) != mtypes.Earliest {
		t.Error("earliest sentinel")
	}
	if (mtypes.Position{LedgerID: math.MaxInt64, EntryID: math.MaxInt64}) != mtypes.Latest {
		t.Error("latest sentinel")
	}
	if mtypes.Earliest.Compare(mtypes.Position{}) >= 0 || mtypes.Latest.Compare(mtypes.Position{LedgerID: 1 << 40}) <= 0 {
		t.Error("sentinels out of order")
	}
}

func TestPositionOrderAndForm(t *testing.T) {
	a, b, c := mtypes.Position{LedgerID: 1, EntryID: 9}, mtypes.Position{LedgerID: 2, EntryID: 0}, mtypes.Position{LedgerID: 2, EntryID: 1}
	if a.Compare(b) != -1 || b.Compare(a) != 1 || b.Compare(c) != -1 || c.Compare(c) != 0 {
		t.Error("order")
	}
	if b.Next() != c {
		t.Errorf("%v.Next() = %v", b, b.Next())
	}
	if s := (mtypes.Position{LedgerID: 12, EntryID: -1}).String(); s != "12:-1" {
		t.Errorf("String = %q", s)
	}
	if s := string(c.AppendTo([]byte("at "))); s != "at 2:1" {
		t.Errorf("AppendTo = %q", s)
	}
}

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in                string
		pos, markDelete   bool // accepted by ParsePosition, ParseMarkDelete
		ledgerID, entryID int64
	}{
		{"12:345", true, true, 12, 345},
		{"0:0", true, true, 0, 0},
		{"7:-1", false, true, 7, -1},
		{"-1:-1", false, true, -1, -1},
		{"-2:0", false, false, 0, 0},
		{"12", false, false, 0, 0},
		{"a:1", false, false, 0, 0},
		{"1:b", false, false, 0, 0},
		{"1:2:3", false, false, 0, 0},
		{"", false, false, 0, 0},
	} {
		want := mtypes.Position{LedgerID: c.ledgerID, EntryID: c.entryID}
		p, err := mtypes.ParsePosition(c.in)
		if (err == nil) != c.pos || (err == nil && p != want) {
			t.Errorf("ParsePosition(%q) = %v, %v", c.in, p, err)
		}
		p, err = mtypes.ParseMarkDelete(c.in)
		if (err == nil) != c.markDelete || (err == nil && p != want) {
			t.Errorf("ParseMarkDelete(%q) = %v, %v", c.in, p, err)
		}
		if err == nil && p.String() != c.in {
			t.Errorf("%q formats as %q", c.in, p.String())
		}
	}
}
