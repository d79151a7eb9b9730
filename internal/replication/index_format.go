package replication

import (
	"bytes"
	"compress/flate"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"

	"github.com/meridian-mq/meridian/internal/mtypes"
)

// The inbound index's snapshot formats (docs/replication-design.md, "Inbound index").
//
// Version 2: a small head record in the properties of cursor IndexCursorName, rewritten per save,
// and sealed chunks, each in the properties of a cursor of its own (ChunkCursorName), written once.
//
//	head, cursor IndexCursorName:
//	  "index.version"  "2"
//	  "index.scanFrom" "<ledgerId>:<entryId>": every replicated entry before it is in the snapshot
//	  "index.head"     packed (see below):
//	      uvarint  next chunk id
//	      uvarint  number of origin keys
//	      per key:
//	          uvarint len(cluster), cluster bytes
//	          u64      incarnation (big endian)
//	          varint   floor ledger, varint floor entry (origin positions <= floor are stored but no
//	                   longer mapped; -1:-1 if none)
//	          uvarint  number of chunks; per chunk, in origin order:
//	              uvarint id, u8 level, uvarint number of runs, uvarint encoded size (before
//	              compression),
//	              varint first ledger, varint first entry (origin of the first run),
//	              varint last ledger, varint last entry (origin end of the last run)
//	          uvarint  number of tail runs, then the tail runs (runs after the last chunk)
//	chunk, cursor ChunkCursorName(id):
//	  "index.chunk"    packed:
//	      u8       2 (format version)
//	      uvarint  len(cluster), cluster bytes; u64 incarnation (big endian): the key it belongs to
//	      uvarint  number of runs, then the runs
//
//	runs, sorted by origin position, each delta-encoded against the previous run (the first
//	against origin 0:-1, local 0:-1):
//	      uvarint  origin ledger - previous origin ledger
//	      uvarint  origin entry - (previous origin end entry + 1) in the same ledger, else origin entry
//	      varint   local ledger - previous local ledger
//	      varint   local entry - (previous local end entry + 1) in the same ledger, else local entry
//	      uvarint  count - 1
//	  Interleaved traffic (every entry a run) costs 5 bytes per run before compression.
//
//	packed: base64 (std, padded) of the bytes compressed with DEFLATE (RFC 1951); at most
//	maxUnpacked bytes once decompressed. The deltas of interleaved traffic are small and
//	repetitive: DEFLATE stores them in about a tenth.
//
// Version 1 (read only): everything in the head cursor's properties, rewritten per save:
//
//	"index.version" "1", "index.scanFrom" as above, "index.data" base64 of:
//	    uvarint number of origins; per origin: uvarint len(cluster), cluster, varint floor ledger,
//	    varint floor entry, uvarint number of runs, per run: varint origin ledger, varint origin
//	    entry, varint local ledger, varint local entry, uvarint count
//  Its origins load as incarnation 0.

// Property keys of the snapshot.
const (
	propVersion  = "index.version"
	propScanFrom = "index.scanFrom"
	propHead     = "index.head"
	propChunk    = "index.chunk"
	propDataV1   = "index.data"
)

// chunkCursorPrefix starts the name of every chunk cursor ("meridian." keeps it out of
// subscription lists and stats, as IndexCursorName).
const chunkCursorPrefix = IndexCursorName + ".chunk."

// ChunkCursorName is the cursor holding chunk id of the index snapshot.
func ChunkCursorName(id uint64) string { return chunkCursorPrefix + strconv.FormatUint(id, 10) }

// chunkIDOf returns the id of a chunk cursor name.
func chunkIDOf(name string) (uint64, bool) {
	s, ok := strings.CutPrefix(name, chunkCursorPrefix)
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseUint(s, 10, 64)
	return id, err == nil
}

var errBadSnapshot = errors.New("replication: bad index snapshot")

// maxUnpacked bounds a packed property once decompressed. The writer stays far below it: a chunk
// holds at most maxChunkBytes, a head a tail below SealBytes per origin cluster plus its chunk list.
const maxUnpacked = 64 << 20

// maxChunkBytes bounds a chunk's encoded runs (before compression; the writer splits and stops
// merging there). Packed, even incompressible, it stays far below storage's bound on a cursor's
// properties.
const maxChunkBytes = 2 << 20

// flateWriters reuse compressors (each holds several hundred KiB).
var flateWriters = sync.Pool{New: func() any {
	w, _ := flate.NewWriter(nil, flate.DefaultCompression)
	return w
}}

// pack compresses b and encodes it as a property value.
func pack(b []byte) string {
	var out bytes.Buffer
	w := flateWriters.Get().(*flate.Writer)
	w.Reset(&out)
	_, _ = w.Write(b) // writes to a bytes.Buffer do not fail
	_ = w.Close()
	flateWriters.Put(w)
	return base64.StdEncoding.EncodeToString(out.Bytes())
}

// unpack reverses pack, refusing more than maxUnpacked bytes.
func unpack(v string) ([]byte, error) {
	z, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errBadSnapshot, err)
	}
	r := flate.NewReader(bytes.NewReader(z))
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, maxUnpacked+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errBadSnapshot, err)
	}
	if len(b) > maxUnpacked {
		return nil, fmt.Errorf("%w: more than %d bytes uncompressed", errBadSnapshot, maxUnpacked)
	}
	return b, nil
}

// maxRunCount bounds a decoded run's count (no origin ledger holds more entries).
const maxRunCount = 1 << 40

// runEncoder appends delta-encoded runs (see the format above).
type runEncoder struct {
	buf                   []byte
	first                 mtypes.Position // origin of the first run
	prevOrigin, prevLocal mtypes.Position // the previous run's ends
	n                     int
}

func newRunEncoder(buf []byte) runEncoder {
	return runEncoder{buf: buf, prevOrigin: mtypes.Position{LedgerID: 0, EntryID: -1}, prevLocal: mtypes.Position{LedgerID: 0, EntryID: -1}}
}

func (e *runEncoder) add(r run) {
	if e.n == 0 {
		e.first = r.origin
	}
	b := binary.AppendUvarint(e.buf, uint64(r.origin.LedgerID-e.prevOrigin.LedgerID))
	if r.origin.LedgerID == e.prevOrigin.LedgerID {
		b = binary.AppendUvarint(b, uint64(r.origin.EntryID-e.prevOrigin.EntryID-1))
	} else {
		b = binary.AppendUvarint(b, uint64(r.origin.EntryID))
	}
	b = binary.AppendVarint(b, r.local.LedgerID-e.prevLocal.LedgerID)
	if r.local.LedgerID == e.prevLocal.LedgerID {
		b = binary.AppendVarint(b, r.local.EntryID-e.prevLocal.EntryID-1)
	} else {
		b = binary.AppendVarint(b, r.local.EntryID)
	}
	e.buf = binary.AppendUvarint(b, uint64(r.count-1))
	e.prevOrigin, e.prevLocal = r.originEnd(), r.localEnd()
	e.n++
}

// snapReader decodes snapshot bytes; the first error sticks.
type snapReader struct {
	b   []byte
	err error
}

func (r *snapReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", errBadSnapshot, what)
	}
}

func (r *snapReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("truncated varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *snapReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("truncated varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *snapReader) u8() uint8 {
	if r.err != nil || len(r.b) < 1 {
		r.fail("truncated")
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *snapReader) u64() uint64 {
	if r.err != nil || len(r.b) < 8 {
		r.fail("truncated")
		return 0
	}
	v := binary.BigEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *snapReader) name() string {
	l := r.uvarint()
	if r.err != nil || l == 0 || l > uint64(len(r.b)) {
		r.fail("origin name")
		return ""
	}
	s := string(r.b[:l])
	r.b = r.b[l:]
	return s
}

func (r *snapReader) position() mtypes.Position {
	return mtypes.Position{LedgerID: r.varint(), EntryID: r.varint()}
}

// count reads a count that announces that many items of at least one byte each.
func (r *snapReader) count(what string) int {
	n := r.uvarint()
	if r.err == nil && n > uint64(len(r.b)) {
		r.fail(what)
	}
	if r.err != nil {
		return 0
	}
	return int(n)
}

// addChecked returns a+b, failing on overflow or a negative result.
func (r *snapReader) addChecked(a, b int64) int64 {
	if (b > 0 && a > math.MaxInt64-b) || (b < 0 && a < math.MinInt64-b) || a+b < 0 {
		r.fail("position out of range")
		return 0
	}
	return a + b
}

// runs decodes n runs (see runEncoder), calling fn for each; they must be sorted by origin.
func (r *snapReader) runs(n int, fn func(run)) {
	prevOrigin, prevLocal := mtypes.Position{LedgerID: 0, EntryID: -1}, mtypes.Position{LedgerID: 0, EntryID: -1}
	for i := 0; i < n && r.err == nil; i++ {
		var rn run
		dl := r.uvarint()
		if dl > math.MaxInt64 {
			r.fail("origin ledger")
			return
		}
		rn.origin.LedgerID = r.addChecked(prevOrigin.LedgerID, int64(dl))
		de := r.uvarint()
		if de > math.MaxInt64 {
			r.fail("origin entry")
			return
		}
		if dl == 0 {
			rn.origin.EntryID = r.addChecked(prevOrigin.EntryID+1, int64(de))
		} else {
			rn.origin.EntryID = int64(de)
		}
		rn.local.LedgerID = r.addChecked(prevLocal.LedgerID, r.varint())
		le := r.varint()
		if rn.local.LedgerID == prevLocal.LedgerID {
			rn.local.EntryID = r.addChecked(prevLocal.EntryID+1, le)
		} else if le < 0 {
			r.fail("local entry")
		} else {
			rn.local.EntryID = le
		}
		c := r.uvarint()
		if c >= maxRunCount {
			r.fail("run count")
		}
		rn.count = int64(c) + 1
		if r.err != nil {
			return
		}
		if rn.origin.EntryID > math.MaxInt64-rn.count || rn.local.EntryID > math.MaxInt64-rn.count {
			r.fail("run out of range")
			return
		}
		if i > 0 && rn.origin.Compare(prevOrigin) <= 0 {
			r.fail("runs not sorted")
			return
		}
		fn(rn)
		prevOrigin, prevLocal = rn.originEnd(), rn.localEnd()
	}
}

// chunkRef is a sealed chunk of an origin key's runs, as the head lists it.
type chunkRef struct {
	id    uint64
	level uint8
	runs  int
	size  int             // encoded runs, bytes before compression
	first mtypes.Position // origin of the first run
	last  mtypes.Position // origin end of the last run
}

// headKey is one origin key of a decoded or encoded head.
type headKey struct {
	key      OriginKey
	floor    mtypes.Position
	chunks   []chunkRef
	tail     []byte // encoded tail runs
	tailRuns int
}

// snapshotHead is the decoded head record.
type snapshotHead struct {
	scanFrom    mtypes.Position
	nextChunkID uint64
	keys        []headKey
}

// encodeHead returns the head's properties.
func encodeHead(h snapshotHead) map[string]string {
	b := binary.AppendUvarint(nil, h.nextChunkID)
	b = binary.AppendUvarint(b, uint64(len(h.keys)))
	for _, k := range h.keys {
		b = binary.AppendUvarint(b, uint64(len(k.key.Cluster)))
		b = append(b, k.key.Cluster...)
		b = binary.BigEndian.AppendUint64(b, k.key.Incarnation)
		b = binary.AppendVarint(b, k.floor.LedgerID)
		b = binary.AppendVarint(b, k.floor.EntryID)
		b = binary.AppendUvarint(b, uint64(len(k.chunks)))
		for _, c := range k.chunks {
			b = binary.AppendUvarint(b, c.id)
			b = append(b, c.level)
			b = binary.AppendUvarint(b, uint64(c.runs))
			b = binary.AppendUvarint(b, uint64(c.size))
			b = binary.AppendVarint(b, c.first.LedgerID)
			b = binary.AppendVarint(b, c.first.EntryID)
			b = binary.AppendVarint(b, c.last.LedgerID)
			b = binary.AppendVarint(b, c.last.EntryID)
		}
		b = binary.AppendUvarint(b, uint64(k.tailRuns))
		b = append(b, k.tail...)
	}
	return map[string]string{
		propVersion:  "2",
		propScanFrom: h.scanFrom.String(),
		propHead:     pack(b),
	}
}

// decodeHead decodes a version 2 head; tail runs are passed to tailRun per key (in key order).
func decodeHead(props map[string]string, tailRun func(k int, r run)) (snapshotHead, error) {
	var h snapshotHead
	scanFrom, err := mtypes.ParsePosition(props[propScanFrom])
	if err != nil {
		return h, fmt.Errorf("%w: %v", errBadSnapshot, err)
	}
	h.scanFrom = scanFrom
	buf, err := unpack(props[propHead])
	if err != nil {
		return h, err
	}
	r := snapReader{b: buf}
	h.nextChunkID = r.uvarint()
	nkeys := r.count("key count")
	seen := map[OriginKey]bool{}
	for ki := 0; ki < nkeys && r.err == nil; ki++ {
		k := headKey{key: OriginKey{Cluster: r.name(), Incarnation: r.u64()}, floor: r.position()}
		if r.err == nil && (seen[k.key] || k.floor.LedgerID < -1 || k.floor.EntryID < -1) {
			r.fail("origin key")
		}
		seen[k.key] = true
		nchunks := r.count("chunk count")
		bound := mtypes.Position{LedgerID: -1, EntryID: -1}
		for range nchunks {
			c := chunkRef{id: r.uvarint(), level: r.u8(), runs: int(min(r.uvarint(), math.MaxInt32)), size: int(min(r.uvarint(), math.MaxInt32)),
				first: r.position(), last: r.position()}
			// The first chunk may begin at or below the floor (runs folded since it was written).
			if r.err == nil && (c.id >= h.nextChunkID || c.runs == 0 || c.first.Compare(bound) <= 0 || c.last.Compare(c.first) < 0 || c.last.Compare(k.floor) <= 0) {
				r.fail("chunk list")
			}
			bound = c.last
			k.chunks = append(k.chunks, c)
		}
		bound = maxPos(bound, k.floor)
		k.tailRuns = r.count("tail run count")
		r.runs(k.tailRuns, func(rn run) {
			if rn.origin.Compare(bound) <= 0 {
				r.fail("tail run before the last chunk")
				return
			}
			tailRun(ki, rn)
		})
		h.keys = append(h.keys, k)
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	return h, r.err
}

// encodeChunk returns the properties of a chunk of key's runs (already encoded by enc).
func encodeChunk(key OriginKey, enc runEncoder) map[string]string {
	b := []byte{2}
	b = binary.AppendUvarint(b, uint64(len(key.Cluster)))
	b = append(b, key.Cluster...)
	b = binary.BigEndian.AppendUint64(b, key.Incarnation)
	b = binary.AppendUvarint(b, uint64(enc.n))
	b = append(b, enc.buf...)
	return map[string]string{propChunk: pack(b)}
}

// decodeChunk decodes the chunk ref of key from its cursor's properties, passing its runs to fn.
func decodeChunk(props map[string]string, key OriginKey, ref chunkRef, fn func(run)) error {
	buf, err := unpack(props[propChunk])
	if err != nil {
		return fmt.Errorf("chunk %d: %w", ref.id, err)
	}
	r := snapReader{b: buf}
	if v := r.u8(); r.err == nil && v != 2 {
		return fmt.Errorf("%w: chunk %d: version %d", errBadSnapshot, ref.id, v)
	}
	if got := (OriginKey{Cluster: r.name(), Incarnation: r.u64()}); r.err == nil && got != key {
		return fmt.Errorf("%w: chunk %d belongs to %v, the head lists it under %v", errBadSnapshot, ref.id, got, key)
	}
	n := r.count("run count")
	if r.err == nil && n != ref.runs {
		r.fail(fmt.Sprintf("chunk %d has %d runs, the head says %d", ref.id, n, ref.runs))
	}
	first, last, i := mtypes.Position{}, mtypes.Position{}, 0
	r.runs(n, func(rn run) {
		if i == 0 {
			first = rn.origin
		}
		last = rn.originEnd()
		i++
		fn(rn)
	})
	if r.err == nil && (first != ref.first || last != ref.last) {
		r.fail(fmt.Sprintf("chunk %d spans %v..%v, the head says %v..%v", ref.id, first, last, ref.first, ref.last))
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	return r.err
}

// v1Origin is an origin of a version 1 snapshot.
type v1Origin struct {
	name  string
	floor mtypes.Position
	runs  []run
}

// decodeV1 decodes a version 1 snapshot.
func decodeV1(props map[string]string) (mtypes.Position, []v1Origin, error) {
	scanFrom, err := mtypes.ParsePosition(props[propScanFrom])
	if err != nil {
		return mtypes.Position{}, nil, fmt.Errorf("%w: %v", errBadSnapshot, err)
	}
	buf, err := base64.StdEncoding.DecodeString(props[propDataV1])
	if err != nil {
		return mtypes.Position{}, nil, fmt.Errorf("%w: %v", errBadSnapshot, err)
	}
	origins, err := decodeOriginsV1(buf)
	return scanFrom, origins, err
}

func decodeOriginsV1(buf []byte) ([]v1Origin, error) {
	r := snapReader{b: buf}
	n := r.count("origin count")
	out := make([]v1Origin, 0, n)
	seen := map[string]bool{}
	for range n {
		o := v1Origin{name: r.name(), floor: r.position()}
		if r.err == nil && seen[o.name] {
			r.fail("origin listed twice")
		}
		seen[o.name] = true
		runs := r.count("run count")
		o.runs = make([]run, 0, runs)
		for range runs {
			rn := run{origin: r.position(), local: r.position()}
			c := r.uvarint()
			if r.err != nil || c == 0 || c > maxRunCount || rn.origin.LedgerID < 0 || rn.origin.EntryID < 0 ||
				rn.origin.EntryID > math.MaxInt64-int64(c) || rn.local.EntryID > math.MaxInt64-int64(c) {
				r.fail("run of " + strconv.Quote(o.name))
				break
			}
			rn.count = int64(c)
			if k := len(o.runs); k > 0 && o.runs[k-1].originEnd().Compare(rn.origin) >= 0 {
				r.fail("runs not sorted")
				break
			}
			o.runs = append(o.runs, rn)
		}
		if r.err != nil {
			break
		}
		out = append(out, o)
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	return out, r.err
}
