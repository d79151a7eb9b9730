package replication

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

func TestCRCCombine(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, sizes := range [][2]int{{0, 0}, {1, 0}, {0, 1}, {5, 7}, {10, 1 << 16}, {300, 100000}, {1, 1<<20 + 3}} {
		a, b := make([]byte, sizes[0]), make([]byte, sizes[1])
		for i := range a {
			a[i] = byte(rng.Uint32())
		}
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		want := crc32.Checksum(append(append([]byte{}, a...), b...), castagnoli)
		got := crcCombine(crc32.Checksum(a, castagnoli), crc32.Checksum(b, castagnoli), shiftOperator(len(b)))
		if got != want {
			t.Fatalf("sizes %v: combine %08x, direct %08x", sizes, got, want)
		}
	}
}

func BenchmarkShiftOperator(b *testing.B) {
	for i := 0; i < b.N; i++ {
		shiftOperator(100 << 10)
	}
}
