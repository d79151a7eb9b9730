package crc32c

import (
	"math/bits"
	"sync/atomic"
)

// ShiftTable applies one Shift by table lookup: eight lookups of 16-entry tables (512 bytes)
// instead of Apply's bit-by-bit multiplication, which costs more than a direct CRC-32C of 1 KiB
// (about 200 ns against 100 ns). Building a table costs about as much as three Applies, so it pays
// only for a shift used many times (one per body length in a stream of equal-sized entries: see
// ShiftCache).
type ShiftTable [8][16]uint32

// Table returns the lookup table of s.
func (s Shift) Table() *ShiftTable {
	// basis[j] is s times the polynomial of bit j alone (bit 31 is x^0, bit 0 x^31).
	var basis [32]uint32
	b := uint32(s)
	for j := 31; j >= 0; j-- {
		basis[j] = b
		if b&1 != 0 {
			b = b>>1 ^ castagnoliReflected
		} else {
			b >>= 1
		}
	}
	t := new(ShiftTable)
	for i := range t {
		for n := 1; n < 16; n++ {
			t[i][n] = t[i][n&(n-1)] ^ basis[4*i+bits.TrailingZeros(uint(n))]
		}
	}
	return t
}

// Apply returns what Shift.Apply returns for the shift this table was built from.
func (t *ShiftTable) Apply(crc uint32) uint32 {
	return t[0][crc&15] ^ t[1][crc>>4&15] ^ t[2][crc>>8&15] ^ t[3][crc>>12&15] ^
		t[4][crc>>16&15] ^ t[5][crc>>20&15] ^ t[6][crc>>24&15] ^ t[7][crc>>28]
}

// ShiftCache keeps the tables of the byte counts a stream of checksums is shifted by most often.
// A count gets a table once it is asked for twice in a row in its slot (eight slots, by count
// modulo 8); until then Lookup reports a miss and the caller checksums directly, so entries of
// ever-changing sizes cost a failed lookup each, not a table each (~0.6 µs). Safe for concurrent
// use; the zero value is ready.
type ShiftCache struct {
	tables [8]atomic.Pointer[countTable]
	asked  [8]atomic.Int64 // the count each slot was last asked for, plus one (0: never)
}

type countTable struct {
	n     int
	table *ShiftTable
}

// Lookup returns the table that shifts a CRC by n bytes (of ShiftFor(n)), or nil when n has none
// yet.
func (c *ShiftCache) Lookup(n int) *ShiftTable {
	i := n & 7
	if t := c.tables[i].Load(); t != nil && t.n == n {
		return t.table
	}
	if c.asked[i].Swap(int64(n)+1) != int64(n)+1 {
		return nil
	}
	t := &countTable{n: n, table: ShiftFor(n).Table()}
	c.tables[i].Store(t)
	return t.table
}
