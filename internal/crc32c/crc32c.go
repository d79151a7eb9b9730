// Package crc32c combines CRC-32C (Castagnoli) checksums of concatenated byte strings without a pass
// over their bytes. CRCs are linear over GF(2):
//
//	crc(A‖B) = crc(A)·x^(8·len(B)) mod P  ⊕  crc(B)
//
// (the pre- and post-conditioning of both sides cancel out), so appending B needs only a
// multiplication by x^(8·len(B)) mod P, computed from a table of x^(2^k) mod P in O(log len(B))
// multiplications. The storage engine seals a journal record from the checksum its segment record
// already carries, and the replicator re-checksums an entry whose metadata it changed, both without a
// second pass over a large body. A leaf package: it imports nothing of Meridian.
package crc32c

// castagnoliReflected is the Castagnoli polynomial, bit-reflected (as hash/crc32 uses it).
const castagnoliReflected = 0x82f63b78

// Shift is x^(8·n) mod P for some byte count n: applying it to a CRC appends n zero bytes (before
// conditioning), which is what combining needs. Compute it once per length and reuse it.
type Shift uint32

// ShiftFor returns the Shift of n bytes.
func ShiftFor(n int) Shift {
	p := uint32(1) << 31 // x^0
	// 8·n = n·2^3: bit j of n stands for x^(2^(j+3)).
	for k, u := 3, uint64(n); u != 0; u, k = u>>1, k+1 {
		if u&1 != 0 {
			p = mulModP(x2nTable[k&31], p)
		}
	}
	return Shift(p)
}

// Apply returns crc·x^(8·n) mod P.
func (s Shift) Apply(crc uint32) uint32 { return mulModP(uint32(s), crc) }

// Combine returns the CRC-32C of A‖B from crcA = CRC-32C(A), crcB = CRC-32C(B) and lenB = len(B).
func Combine(crcA, crcB uint32, lenB int) uint32 { return ShiftFor(lenB).Apply(crcA) ^ crcB }

// mulModP multiplies a and b modulo the polynomial (reflected representation: bit 31 is x^0).
func mulModP(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
			if a&(m-1) == 0 {
				break
			}
		}
		if b&1 != 0 {
			b = b>>1 ^ castagnoliReflected
		} else {
			b >>= 1
		}
	}
	return p
}

// x2nTable[k] is x^(2^k) mod P.
var x2nTable = func() (t [32]uint32) {
	p := uint32(1) << 30 // x^1
	t[0] = p
	for k := 1; k < 32; k++ {
		p = mulModP(p, p)
		t[k] = p
	}
	return t
}()
