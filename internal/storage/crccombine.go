package storage

// CRC-32C of a concatenation from the CRCs of its parts. CRCs are linear over GF(2): with
// crc(A||B) = crc(A)·x^(8·len(B)) mod P  xor  crc(B) (pre- and post-conditioning cancel out), so
// appending B's CRC needs only a multiplication by x^(8·len(B)) mod P, computed from a table of
// x^(2^k) mod P in O(log len(B)) multiplications. The journal seals an entry record this way from
// the CRC its segment record already carries, instead of a second pass over the entry's bytes.

// castagnoliReflected is the Castagnoli polynomial, bit-reflected (as hash/crc32 uses it).
const castagnoliReflected = 0x82f63b78

// gfMulModP multiplies a and b modulo the polynomial (reflected representation: bit 31 is x^0).
func gfMulModP(a, b uint32) uint32 {
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
		p = gfMulModP(p, p)
		t[k] = p
	}
	return t
}()

// xPow8nModP is x^(8·n) mod P.
func xPow8nModP(n uint64) uint32 {
	p := uint32(1) << 31 // x^0
	for k := 3; n != 0; n, k = n>>1, k+1 {
		if n&1 != 0 {
			p = gfMulModP(x2nTable[k&31], p)
		}
	}
	return p
}

// crcCombine returns the CRC-32C of A||B given crcA = CRC-32C(A), crcB = CRC-32C(B), lenB = len(B).
func crcCombine(crcA, crcB uint32, lenB int) uint32 {
	return gfMulModP(xPow8nModP(uint64(lenB)), crcA) ^ crcB
}
