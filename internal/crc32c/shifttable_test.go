package crc32c

import (
	"math/rand/v2"
	"testing"
)

func TestShiftTableMatchesApply(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 200; i++ {
		n := rng.IntN(1 << 20)
		s := ShiftFor(n)
		tab := s.Table()
		for j := 0; j < 50; j++ {
			c := rng.Uint32()
			if got, want := tab.Apply(c), s.Apply(c); got != want {
				t.Fatalf("n=%d crc=%08x: table %08x, Apply %08x", n, c, got, want)
			}
		}
	}
}

func TestShiftCacheCombines(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var c ShiftCache
	hits := 0
	for i := 0; i < 2000; i++ {
		nb := 1024
		if i%3 == 0 {
			nb = rng.IntN(5000)
		}
		a, b := randomBytes(rng, rng.IntN(100)), randomBytes(rng, nb)
		want := crc(append(append([]byte(nil), a...), b...))
		if tab := c.Lookup(len(b)); tab != nil {
			hits++
			if got := tab.Apply(crc(a)) ^ crc(b); got != want {
				t.Fatalf("lengths %d+%d: combined %08x, direct %08x", len(a), len(b), got, want)
			}
		}
	}
	if hits < 1000 {
		t.Fatalf("%d hits of 2000 lookups (two thirds ask for 1024)", hits)
	}
}

func BenchmarkShiftTableApply(b *testing.B) {
	tab := ShiftFor(1024).Table()
	var x uint32
	for i := 0; i < b.N; i++ {
		x = tab.Apply(x ^ uint32(i))
	}
	sink = x
}

func BenchmarkShiftTableBuild(b *testing.B) {
	for i := 0; i < b.N; i++ {
		_ = Shift(uint32(i) | 1).Table()
	}
}

func BenchmarkShiftApply(b *testing.B) {
	s := ShiftFor(1024)
	var x uint32
	for i := 0; i < b.N; i++ {
		x = s.Apply(x ^ uint32(i))
	}
	sink = x
}

var sink uint32

func TestShiftCacheConcurrent(t *testing.T) {
	var c ShiftCache
	done := make(chan bool)
	for g := 0; g < 4; g++ {
		go func(g int) {
			ok := true
			for i := 0; i < 2000; i++ {
				n := 1000 + (i+g)%12
				if tab := c.Lookup(n); tab != nil && tab.Apply(0x12345678) != ShiftFor(n).Apply(0x12345678) {
					ok = false
				}
			}
			done <- ok
		}(g)
	}
	for g := 0; g < 4; g++ {
		if !<-done {
			t.Fatal("a table shifted by the wrong count")
		}
	}
}

// FuzzShiftTable: combining with a table gives the CRC of the concatenation, for any two inputs.
func FuzzShiftTable(f *testing.F) {
	f.Add([]byte("head"), []byte("body of some length"))
	f.Add([]byte{}, []byte{})
	f.Add([]byte{0xff}, make([]byte, 1024))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		want := crc(append(append([]byte(nil), a...), b...))
		if got := ShiftFor(len(b)).Table().Apply(crc(a)) ^ crc(b); got != want {
			t.Fatalf("lengths %d+%d: table %08x, direct %08x", len(a), len(b), got, want)
		}
	})
}
