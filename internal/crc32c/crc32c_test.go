package crc32c

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func TestCombineMatchesDirect(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := [][2]int{{0, 0}, {1, 0}, {0, 1}, {5, 7}, {10, 1 << 16}, {300, 100000}, {1, 1<<20 + 3}}
	for i := 0; i < 300; i++ {
		sizes = append(sizes, [2]int{rng.IntN(100), rng.IntN(5000)})
	}
	for _, sz := range sizes {
		a, b := randomBytes(rng, sz[0]), randomBytes(rng, sz[1])
		want := crc(append(append([]byte(nil), a...), b...))
		if got := Combine(crc(a), crc(b), len(b)); got != want {
			t.Fatalf("sizes %v: combined %08x, direct %08x", sz, got, want)
		}
		// Removing A's share from crc(A‖B) gives crc(B) back: what the replicator does to check a
		// stored body before it re-heads it.
		if got := want ^ ShiftFor(len(b)).Apply(crc(a)); got != crc(b) {
			t.Fatalf("sizes %v: body crc %08x, want %08x", sz, got, crc(b))
		}
	}
}

func BenchmarkShiftFor(b *testing.B) {
	for i := 0; i < b.N; i++ {
		ShiftFor(100 << 10)
	}
}
