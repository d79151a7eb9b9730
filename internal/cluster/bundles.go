package cluster

import (
	"errors"
	"fmt"
	"hash/crc32"
	"sort"
	"strconv"
	"strings"
)

// A namespace is split into bundles: ranges of a 32-bit hash of the topic's full name, as Pulsar
// splits it. A topic belongs to the bundle whose range holds crc32(IEEE) of its full name
// ("persistent://tenant/ns/topic", each partition hashed under its own name), so the owner of a
// topic is the owner of its bundle (docs/cluster.md).

// DefaultBundleCount is Pulsar's defaultNumberOfNamespaceBundles.
const DefaultBundleCount = 4

// MaxBundleCount bounds the bundles of one namespace (each is an ownership record in the store).
const MaxBundleCount = 1024

// fullUpper is the hash space's top: the last range is closed there.
const fullUpper = 0xffffffff

// Range is one bundle's hash range: [Lower, Upper), or [Lower, Upper] when Upper is the top of the
// hash space.
type Range struct {
	Lower, Upper uint32
}

// String is Pulsar's bundle range name, "0x00000000_0x40000000".
func (r Range) String() string { return fmt.Sprintf("0x%08x_0x%08x", r.Lower, r.Upper) }

// Contains reports whether hash h falls in the range.
func (r Range) Contains(h uint32) bool {
	if r.Upper == fullUpper {
		return h >= r.Lower
	}
	return h >= r.Lower && h < r.Upper
}

// ParseRange parses "0xLLLLLLLL_0xUUUUUUUU".
func ParseRange(s string) (Range, error) {
	lo, hi, ok := strings.Cut(s, "_")
	if !ok {
		return Range{}, fmt.Errorf("bundle range %q: want 0xLOWER_0xUPPER", s)
	}
	l, err1 := parseHex32(lo)
	u, err2 := parseHex32(hi)
	if err := errors.Join(err1, err2); err != nil {
		return Range{}, fmt.Errorf("bundle range %q: %w", s, err)
	}
	if l >= u {
		return Range{}, fmt.Errorf("bundle range %q: lower bound must be below the upper", s)
	}
	return Range{Lower: l, Upper: u}, nil
}

func parseHex32(s string) (uint32, error) {
	if !strings.HasPrefix(s, "0x") {
		return 0, fmt.Errorf("%q is not 0x-prefixed hex", s)
	}
	v, err := strconv.ParseUint(s[2:], 16, 32)
	return uint32(v), err
}

// EvenRanges splits the hash space into n equal ranges, as Pulsar's numBundles does: boundary i is
// i * (2^32 / n), and the last range ends at 0xffffffff.
func EvenRanges(n int) []Range {
	if n < 1 {
		n = 1
	}
	if n > MaxBundleCount {
		n = MaxBundleCount
	}
	seg := (uint64(1) << 32) / uint64(n)
	out := make([]Range, n)
	for i := range out {
		out[i].Lower = uint32(uint64(i) * seg)
		if i == n-1 {
			out[i].Upper = fullUpper
		} else {
			out[i].Upper = uint32(uint64(i+1) * seg)
		}
	}
	return out
}

// RangesFromBoundaries turns a namespace policy's boundaries ("0x00000000", ..., "0xffffffff") into
// ranges; they must start at 0, end at 0xffffffff and increase.
func RangesFromBoundaries(bounds []string) ([]Range, error) {
	if len(bounds) < 2 || len(bounds)-1 > MaxBundleCount {
		return nil, fmt.Errorf("bundle boundaries: want 2 to %d, got %d", MaxBundleCount+1, len(bounds))
	}
	vals := make([]uint32, len(bounds))
	for i, b := range bounds {
		v, err := parseHex32(b)
		if err != nil {
			return nil, fmt.Errorf("bundle boundary %d: %w", i, err)
		}
		if i > 0 && v <= vals[i-1] {
			return nil, fmt.Errorf("bundle boundaries must increase (%s after %s)", b, bounds[i-1])
		}
		vals[i] = v
	}
	if vals[0] != 0 || vals[len(vals)-1] != fullUpper {
		return nil, errors.New("bundle boundaries must start at 0x00000000 and end at 0xffffffff")
	}
	out := make([]Range, len(vals)-1)
	for i := range out {
		out[i] = Range{Lower: vals[i], Upper: vals[i+1]}
	}
	return out, nil
}

// Hash is the bundle hash of a topic's full name ("persistent://t/ns/x-partition-3").
func Hash(fullTopicName string) uint32 { return crc32.ChecksumIEEE([]byte(fullTopicName)) }

// Find returns the range of ranges (sorted, covering the hash space) that holds the topic.
func Find(ranges []Range, fullTopicName string) Range {
	h := Hash(fullTopicName)
	i := sort.Search(len(ranges), func(i int) bool { return h < ranges[i].Upper })
	if i == len(ranges) { // h is 0xffffffff: the last range is closed there
		i = len(ranges) - 1
	}
	return ranges[i]
}

// Bundle names one bundle of one namespace.
type Bundle struct {
	Namespace string // "tenant/ns"
	Range     Range
}

// String is Pulsar's bundle name, "tenant/ns/0x00000000_0x40000000".
func (b Bundle) String() string { return b.Namespace + "/" + b.Range.String() }
