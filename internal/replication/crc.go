package replication

import "hash/crc32"

// CRC32C of a concatenation from the CRCs of its parts (zlib's crc32_combine, for the Castagnoli
// polynomial). The replicator checks a large entry's stored checksum and computes the checksum of
// the entry it sends, which differs only in the metadata, with one pass over the body instead of
// two: crc(A‖B) = crc(A)·x^(8·len(B)) ⊕ crc(B) in GF(2)[x] modulo the polynomial, independent of
// the pre- and post-conditioning that both sides share.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// castagnoliReversed is the Castagnoli polynomial in the bit order crc32 uses.
const castagnoliReversed = 0x82f63b78

// x2nTable[k] is x^(2^k) modulo the polynomial.
var x2nTable = func() (t [32]uint32) {
	p := uint32(1) << 30 // x^1
	t[0] = p
	for k := 1; k < 32; k++ {
		p = multModP(p, p)
		t[k] = p
	}
	return t
}()

// multModP returns a·b modulo the polynomial (reflected representation: bit 31 is x^0).
func multModP(a, b uint32) uint32 {
	m := uint32(1) << 31
	var p uint32
	for {
		if a&m != 0 {
			p ^= b
			if a&(m-1) == 0 {
				break
			}
		}
		m >>= 1
		if b&1 != 0 {
			b = b>>1 ^ castagnoliReversed
		} else {
			b >>= 1
		}
	}
	return p
}

// shiftOperator returns x^(8·n) modulo the polynomial: multiplying a CRC by it appends n bytes
// of zeros (before conditioning), which is what combining needs.
func shiftOperator(n int) uint32 {
	p := uint32(1) << 31 // x^0
	k := 3               // 8·n = n·2^3
	for u := uint64(n); u != 0; u >>= 1 {
		if u&1 != 0 {
			p = multModP(x2nTable[k&31], p)
		}
		k++
	}
	return p
}

// crcCombine returns the CRC32C of A‖B from crc(A), crc(B) and shiftOperator(len(B)).
func crcCombine(crcA, crcB, shift uint32) uint32 { return multModP(shift, crcA) ^ crcB }
