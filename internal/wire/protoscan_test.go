package wire

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// FuzzConsumeMatchesProtowire: the fast paths give protowire's results and errors for any input.
func FuzzConsumeMatchesProtowire(f *testing.F) {
	for _, s := range [][]byte{{}, {0}, {0x08}, {0x08, 0x01}, {0x0a, 0x02, 'h', 'i'}, {0x0a, 0x05, 'h'}, {0x80},
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, {0x7f}, {0x03}, {0x0b, 0x0c}, {0x7a, 0x00}} {
		f.Add(s, uint8(0))
	}
	f.Fuzz(func(t *testing.T, b []byte, typ uint8) {
		n1, t1, k1 := ConsumeTag(b)
		n2, t2, k2 := protowire.ConsumeTag(b)
		if n1 != n2 || t1 != t2 || k1 != k2 {
			t.Fatalf("ConsumeTag(%x) = %d %d %d, protowire %d %d %d", b, n1, t1, k1, n2, t2, k2)
		}
		v1, k1 := ConsumeVarint(b)
		v2, k2 := protowire.ConsumeVarint(b)
		if v1 != v2 || k1 != k2 {
			t.Fatalf("ConsumeVarint(%x) = %d %d, protowire %d %d", b, v1, k1, v2, k2)
		}
		s1, k1 := ConsumeBytes(b)
		s2, k2 := protowire.ConsumeBytes(b)
		if !bytes.Equal(s1, s2) || k1 != k2 || (s1 == nil) != (s2 == nil) {
			t.Fatalf("ConsumeBytes(%x) = %x %d, protowire %x %d", b, s1, k1, s2, k2)
		}
		wt := protowire.Type(typ & 7)
		if f1, f2 := ConsumeFieldValue(1, wt, b), protowire.ConsumeFieldValue(1, wt, b); f1 != f2 {
			t.Fatalf("ConsumeFieldValue(1, %d, %x) = %d, protowire %d", wt, b, f1, f2)
		}
	})
}
