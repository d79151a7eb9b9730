package storage

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"net/url"
	"strings"

	"github.com/meridian-mq/meridian/internal/crc32c"
)

// FormatVersion is the on-disk format version of segment, index, cursor-log and state files.
const FormatVersion = 1

// journalFormatVersion is the version of the journal files this build writes. Version 2 seeds
// every record's CRC-32C with the file's sequence number and ends a rotated file with an end
// record, so that journal files can be recycled (overwritten in place, see recycle.go): records
// left over from a file's previous use never pass as records of its new sequence. Version 1
// journal files (unseeded, never recycled) are still replayed. Version 3 has the same layout; it
// says that the journal files of this data directory may end with files made ahead of rotation
// that hold no record (nextjournal.go), which recovery skips: a build that reads only versions 1
// and 2 would take the torn tail of the file before one for damage, so it refuses version 3
// instead (unsupported version) rather than report corruption. Version 4 adds the direct-write
// records (types 10 and 11, directwrite.go): a build that reads only versions 1-3 would report them
// as corruption, so it refuses version 4 as unsupported.
const journalFormatVersion = 4

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// File headers are 32 bytes: magic[8] version u32 kind-specific u32 id u64 reserved u32 crc32c(bytes 0..28) u32.
const headerSize = 32

var (
	magicSegment = [8]byte{'M', 'R', 'D', 'N', '-', 'S', 'E', 'G'}
	magicJournal = [8]byte{'M', 'R', 'D', 'N', '-', 'J', 'N', 'L'}
	magicCursors = [8]byte{'M', 'R', 'D', 'N', '-', 'C', 'U', 'R'}
	magicIndex   = [8]byte{'M', 'R', 'D', 'N', '-', 'I', 'D', 'X'}
	magicState   = [8]byte{'M', 'R', 'D', 'N', '-', 'S', 'T', 'A'}
	magicIncarn  = [8]byte{'M', 'R', 'D', 'N', '-', 'I', 'N', 'C'}
)

func appendHeader(b []byte, magic [8]byte, id uint64) []byte {
	return appendHeaderFlags(b, magic, id, 0)
}

func appendHeaderFlags(b []byte, magic [8]byte, id uint64, flags uint32) []byte {
	version := uint32(FormatVersion)
	switch magic {
	case magicJournal:
		version = journalFormatVersion
	case magicState:
		version = stateFormatVersion
	}
	return appendHeaderVersion(b, magic, id, flags, version)
}

func appendHeaderVersion(b []byte, magic [8]byte, id uint64, flags, version uint32) []byte {
	start := len(b)
	b = append(b, magic[:]...)
	b = binary.LittleEndian.AppendUint32(b, version)
	b = binary.LittleEndian.AppendUint32(b, flags)
	b = binary.LittleEndian.AppendUint64(b, id)
	b = binary.LittleEndian.AppendUint32(b, 0)
	return binary.LittleEndian.AppendUint32(b, crc(b[start:]))
}

// parseHeader checks a 32-byte header and returns its id.
func parseHeader(b []byte, magic [8]byte) (uint64, error) {
	id, _, err := parseHeaderFlags(b, magic)
	return id, err
}

// journalFlagPrevUnclean in a journal header says the previous journal file was abandoned after
// a failed write or fsync: its tail may be torn although it is not the last file.
const journalFlagPrevUnclean = 1

func parseHeaderFlags(b []byte, magic [8]byte) (uint64, uint32, error) {
	id, err := parseHeaderOnly(b, magic)
	if err != nil {
		return 0, 0, err
	}
	return id, binary.LittleEndian.Uint32(b[12:16]), nil
}

// parseJournalHeader checks a journal file header and returns its sequence number, flags and
// the seed its records' checksums start with (nil for version 1).
func parseJournalHeader(b []byte) (seq uint64, flags uint32, seed []byte, err error) {
	seq, flags, err = parseHeaderFlags(b, magicJournal)
	if err != nil {
		return 0, 0, nil, err
	}
	if binary.LittleEndian.Uint32(b[8:12]) >= 2 {
		seed = journalSeed(seq)
	}
	return seq, flags, seed, nil
}

// journalSeed is what a version-2 journal record's CRC-32C covers before the body: the file's
// sequence number, u64 little-endian.
func journalSeed(seq uint64) []byte { return binary.LittleEndian.AppendUint64(nil, seq) }

func parseHeaderOnly(b []byte, magic [8]byte) (uint64, error) {
	if len(b) < headerSize {
		return 0, fmt.Errorf("%w: short header (%d bytes)", ErrCorrupt, len(b))
	}
	if [8]byte(b[:8]) != magic {
		return 0, fmt.Errorf("%w: bad magic %q", ErrCorrupt, b[:8])
	}
	if got, want := binary.LittleEndian.Uint32(b[28:32]), crc(b[:28]); got != want {
		return 0, fmt.Errorf("%w: header checksum mismatch", ErrCorrupt)
	}
	if v := binary.LittleEndian.Uint32(b[8:12]); v != FormatVersion && (magic != magicJournal || v < 2 || v > journalFormatVersion) &&
		(magic != magicState || v != stateFormatVersion) {
		return 0, fmt.Errorf("%w: format version %d (this build reads %d, journals %d, state %d)", errUnsupportedVersion, v, FormatVersion, journalFormatVersion, stateFormatVersion)
	}
	return binary.LittleEndian.Uint64(b[16:24]), nil
}

// Records (journal, segments, cursor logs): bodyLen u32 LE, crc32c(body) u32 LE, body.
const recHeaderSize = 8

// Segment record body: entryID u64, publishTime i64, data.
const segBodyPrefix = 16
const segRecordOverhead = recHeaderSize + segBodyPrefix

// maxRecordBody bounds any record body we accept when decoding (the largest legal entry plus slack).
const maxRecordBody = 64 << 20

// errUnsupportedVersion: a well-formed header of another format version (never treated as torn).
var errUnsupportedVersion = errors.New("storage: unsupported on-disk format version")

// errTorn says a record is incomplete or fails its checksum: at a file's tail this is a torn write.
var errTorn = errors.New("torn or corrupt record")

// decodeRecord parses one record at the start of b (seed, if any, is checksummed before the
// body). It returns the body and the record's total size.
func decodeRecord(b []byte, seed []byte) (body []byte, size int, err error) {
	if len(b) < recHeaderSize {
		return nil, 0, errTorn
	}
	n := binary.LittleEndian.Uint32(b)
	if n > maxRecordBody || int(n) > len(b)-recHeaderSize {
		return nil, 0, errTorn
	}
	body = b[recHeaderSize : recHeaderSize+int(n)]
	sum := crc32.Update(crc32.Update(0, castagnoli, seed), castagnoli, body)
	if sum != binary.LittleEndian.Uint32(b[4:8]) {
		return nil, 0, errTorn
	}
	return body, recHeaderSize + int(n), nil
}

// appendSegRecord appends a segment record for one entry.
func appendSegRecord(b []byte, entryID, publishTime int64, data []byte) []byte {
	start := len(b)
	b = binary.LittleEndian.AppendUint32(b, uint32(segBodyPrefix+len(data)))
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = binary.LittleEndian.AppendUint64(b, uint64(entryID))
	b = binary.LittleEndian.AppendUint64(b, uint64(publishTime))
	b = append(b, data...)
	binary.LittleEndian.PutUint32(b[start+4:], crc(b[start+recHeaderSize:]))
	return b
}

// parseSegBody splits a segment record body.
func parseSegBody(body []byte) (entryID, publishTime int64, data []byte, err error) {
	if len(body) < segBodyPrefix {
		return 0, 0, nil, fmt.Errorf("%w: short entry record", ErrCorrupt)
	}
	return int64(binary.LittleEndian.Uint64(body)), int64(binary.LittleEndian.Uint64(body[8:])), body[16:], nil
}

// Journal record types.
const (
	jEntry     byte = 1 // slot u32, ledgerID u64, segment record
	jAnnounce  byte = 2 // slot u32, ledger name
	jCursor    byte = 3 // slot u32, cursor state (see encodeCursorState)
	jDelCursor byte = 4 // slot u32, cursor name
	jTrim      byte = 5 // slot u32, ledgerID u64: the segment file is removed
	jDelLedger byte = 6 // slot u32: the whole ledger directory is removed
	jVoid      byte = 7 // slot u32: the ledger was fenced; its later entries in the journal were never acknowledged
	jCreate    byte = 8 // slot u32: the ledger was created (its directory exists from now on)
	jEnd       byte = 9 // slot u32 (0): last record of a rotated journal file (version 2)
	// slot u32, ledgerID u64, first entry u64, count u32, file offset u64, length u64: entries
	// written straight to their segment file by this group commit (version 4, directwrite.go)
	jEntryRef byte = 10
	// slot u32, ledgerID u64: from here on in this journal file, the segment may get direct
	// writes, so its tail after the last acknowledged entry may hold unacknowledged data (version 4)
	jDirectStart byte = 11
)

// entryRecordHead is the part of a journal entry record before its segment record: the record
// header (length, CRC), type u8, slot u32, ledger id u64.
const entryRecordHead = recHeaderSize + 1 + 4 + 8

// appendEntryRef appends a jEntryRef record (unsealed).
func appendEntryRef(b []byte, slot uint32, ledgerID, first int64, count int, off, length int64) []byte {
	b, start := beginJournalRecord(b, jEntryRef, slot)
	b = binary.LittleEndian.AppendUint64(b, uint64(ledgerID))
	b = binary.LittleEndian.AppendUint64(b, uint64(first))
	b = binary.LittleEndian.AppendUint32(b, uint32(count))
	b = binary.LittleEndian.AppendUint64(b, uint64(off))
	b = binary.LittleEndian.AppendUint64(b, uint64(length))
	finishJournalRecord(b, start)
	return b
}

// entryRef is a decoded jEntryRef record body (after type and slot).
type entryRef struct {
	ledgerID, first, off, length int64
	count                        int64
}

func parseEntryRef(rest []byte) (entryRef, error) {
	if len(rest) != 8+8+4+8+8 {
		return entryRef{}, fmt.Errorf("%w: entry reference record of %d bytes", ErrCorrupt, len(rest))
	}
	r := entryRef{
		ledgerID: int64(binary.LittleEndian.Uint64(rest)),
		first:    int64(binary.LittleEndian.Uint64(rest[8:])),
		count:    int64(binary.LittleEndian.Uint32(rest[16:])),
		off:      int64(binary.LittleEndian.Uint64(rest[20:])),
		length:   int64(binary.LittleEndian.Uint64(rest[28:])),
	}
	if r.ledgerID < 0 || r.first < 0 || r.count == 0 || r.off < headerSize || r.length <= 0 || r.first > math.MaxInt64-r.count {
		return entryRef{}, fmt.Errorf("%w: entry reference record out of range", ErrCorrupt)
	}
	return r, nil
}

// appendAnnounce appends a jAnnounce record (unsealed): slot is ledger name from here on in this
// journal file.
func appendAnnounce(b []byte, slot uint32, name string) []byte {
	b, start := beginJournalRecord(b, jAnnounce, slot)
	b = append(b, name...)
	finishJournalRecord(b, start)
	return b
}

// appendDirectStart appends a jDirectStart record (unsealed).
func appendDirectStart(b []byte, slot uint32, ledgerID int64) []byte {
	b, start := beginJournalRecord(b, jDirectStart, slot)
	b = binary.LittleEndian.AppendUint64(b, uint64(ledgerID))
	finishJournalRecord(b, start)
	return b
}

// appendJournalRecordHeader reserves the record header; finishJournalRecord fills it.
func beginJournalRecord(b []byte, typ byte, slot uint32) ([]byte, int) {
	start := len(b)
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 0, typ)
	b = binary.LittleEndian.AppendUint32(b, slot)
	return b, start
}

// appendJournalBody appends a journal record of type typ for slot whose body is body (a
// cursor-log record, for jCursor and jDelCursor) and returns where body starts in b.
func appendJournalBody(b []byte, typ byte, slot uint32, body []byte) ([]byte, int) {
	b, start := beginJournalRecord(b, typ, slot)
	off := len(b)
	b = append(b, body...)
	finishJournalRecord(b, start)
	return b, off
}

// finishJournalRecord fills in the record's length. Its checksum is filled in by
// sealJournalRecords when the sync loop writes it, because only then is the journal file (whose
// sequence number seeds the checksum) known for sure.
func finishJournalRecord(b []byte, start int) {
	binary.LittleEndian.PutUint32(b[start:], uint32(len(b)-start-recHeaderSize))
}

// sealJournalRecords fills in the CRC-32C of every record in buf (whole records, as laid out by
// beginJournalRecord/finishJournalRecord), starting from seed.
func sealJournalRecords(buf, seed []byte) {
	start := crc32.Update(0, castagnoli, seed)
	for off := 0; off+recHeaderSize <= len(buf); {
		n := int(binary.LittleEndian.Uint32(buf[off:]))
		body := buf[off+recHeaderSize : off+recHeaderSize+n]
		var sum uint32
		if len(body) >= entryRecordPrefix+combineMin && body[0] == jEntry &&
			int(binary.LittleEndian.Uint32(body[entryRecordPrefix-recHeaderSize:])) == len(body)-entryRecordPrefix {
			// An entry record ends with a segment record whose CRC covers the rest of the body.
			segSum := binary.LittleEndian.Uint32(body[entryRecordPrefix-4:])
			sum = crc32c.Combine(crc32.Update(start, castagnoli, body[:entryRecordPrefix]), segSum, len(body)-entryRecordPrefix)
		} else {
			sum = crc32.Update(start, castagnoli, body)
		}
		binary.LittleEndian.PutUint32(buf[off+4:], sum)
		off += recHeaderSize + n
	}
}

// entryRecordPrefix is the part of an entry record's body before its segment record's body:
// type u8, slot u32, ledger id u64, segment record header (length u32, CRC u32).
const entryRecordPrefix = 1 + 4 + 8 + recHeaderSize

// combineMin: below this many bytes of segment record body a direct CRC is cheaper than combining
// (measured: combining costs 0.3-0.5 us; a direct CRC-32C of 4 KiB 0.2 us, of 16 KiB 1.4 us).
const combineMin = 8 << 10

// appendEndRecord appends the end record of a rotated journal file.
func appendEndRecord(b []byte) []byte {
	b, start := beginJournalRecord(b, jEnd, 0)
	finishJournalRecord(b, start)
	return b
}

// Cursor log record types (body: type u8, then payload).
const (
	cState  byte = 1 // encodeCursorState
	cDelete byte = 2 // cursor name
)

func appendPlainRecord(b []byte, body []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(body)))
	b = binary.LittleEndian.AppendUint32(b, crc(body))
	return append(b, body...)
}

// ---- engine state file ----

// stateFormatVersion is the version of the state file this build writes. Version 2 adds the
// number of durable records in the incarnations file (incarnation.go), so that a record lost from
// its end is told from an interrupted append; version-1 state files (no incarnations recorded)
// are still read. A build that reads only version 1 refuses a data directory with a version-2
// state file (unsupported version): it would not record incarnations, and would not find ledger
// directories under their hashed names (dirName).
const stateFormatVersion = 2

// engineState is the content of the engine's state file.
type engineState struct {
	ledgerIDLimit uint64 // ledger ids below this may have been handed out; the next run starts here
	firstJournal  uint64 // the first journal file recovery must replay
	incarnations  uint64 // records of the incarnations file that are durable (0 in version 1)
}

func encodeEngineState(s engineState) []byte {
	b := appendHeader(nil, magicState, 0)
	body := binary.LittleEndian.AppendUint64(nil, s.ledgerIDLimit)
	body = binary.LittleEndian.AppendUint64(body, s.firstJournal)
	body = binary.LittleEndian.AppendUint64(body, s.incarnations)
	return appendPlainRecord(b, body)
}

func decodeEngineState(b []byte) (engineState, error) {
	if _, err := parseHeader(b, magicState); err != nil {
		return engineState{}, err
	}
	want := 24
	if binary.LittleEndian.Uint32(b[8:12]) == 1 {
		want = 16
	}
	body, _, err := decodeRecord(b[headerSize:], nil)
	if err != nil || len(body) != want {
		return engineState{}, fmt.Errorf("%w: engine state record", ErrCorrupt)
	}
	st := engineState{ledgerIDLimit: binary.LittleEndian.Uint64(body), firstJournal: binary.LittleEndian.Uint64(body[8:])}
	if want == 24 {
		st.incarnations = binary.LittleEndian.Uint64(body[16:])
	}
	return st, nil
}

// ---- segment index files ----

// indexPoint marks where an entry's record starts; maxTime is the largest publish time among the
// entries from this point up to the next point.
type indexPoint struct {
	entryID int64
	offset  int64
	maxTime int64
}

// segIndex summarises a sealed segment.
type segIndex struct {
	ledgerID int64
	entries  int64
	bytes    int64 // entry data bytes
	fileSize int64
	minTime  int64
	maxTime  int64
	points   []indexPoint
}

func encodeIndex(ix *segIndex) []byte {
	b := appendHeader(nil, magicIndex, uint64(ix.ledgerID))
	body := make([]byte, 0, 52+24*len(ix.points))
	for _, v := range []int64{ix.entries, ix.bytes, ix.fileSize, ix.minTime, ix.maxTime} {
		body = binary.LittleEndian.AppendUint64(body, uint64(v))
	}
	body = binary.LittleEndian.AppendUint32(body, uint32(len(ix.points)))
	for _, p := range ix.points {
		body = binary.LittleEndian.AppendUint64(body, uint64(p.entryID))
		body = binary.LittleEndian.AppendUint64(body, uint64(p.offset))
		body = binary.LittleEndian.AppendUint64(body, uint64(p.maxTime))
	}
	return appendPlainRecord(b, body)
}

func decodeIndex(b []byte) (*segIndex, error) {
	id, err := parseHeader(b, magicIndex)
	if err != nil {
		return nil, err
	}
	body, _, err := decodeRecord(b[headerSize:], nil)
	if err != nil || len(body) < 44 {
		return nil, fmt.Errorf("%w: index record", ErrCorrupt)
	}
	ix := &segIndex{ledgerID: int64(id)}
	vals := []*int64{&ix.entries, &ix.bytes, &ix.fileSize, &ix.minTime, &ix.maxTime}
	for i, v := range vals {
		*v = int64(binary.LittleEndian.Uint64(body[8*i:]))
	}
	n := binary.LittleEndian.Uint32(body[40:])
	rest := body[44:]
	if uint64(len(rest)) != uint64(n)*24 {
		return nil, fmt.Errorf("%w: index has %d bytes for %d points", ErrCorrupt, len(rest), n)
	}
	ix.points = make([]indexPoint, n)
	for i := range ix.points {
		p := rest[24*i:]
		ix.points[i] = indexPoint{int64(binary.LittleEndian.Uint64(p)), int64(binary.LittleEndian.Uint64(p[8:])), int64(binary.LittleEndian.Uint64(p[16:]))}
	}
	if ix.entries < 0 || ix.bytes < 0 || ix.fileSize < headerSize {
		return nil, fmt.Errorf("%w: index counters out of range", ErrCorrupt)
	}
	for i, p := range ix.points {
		if p.entryID < 0 || p.entryID >= ix.entries || p.offset < headerSize || p.offset >= ix.fileSize ||
			(i > 0 && (p.entryID <= ix.points[i-1].entryID || p.offset <= ix.points[i-1].offset)) {
			return nil, fmt.Errorf("%w: index point %d out of order", ErrCorrupt, i)
		}
	}
	if ix.entries > 0 && (len(ix.points) == 0 || ix.points[0].entryID != 0) {
		return nil, fmt.Errorf("%w: index does not start at entry 0", ErrCorrupt)
	}
	return ix, nil
}

// ---- ledger directory names ----

// dirName maps an opaque ledger name to a directory name: bytes outside [A-Za-z0-9._-] are
// %XX-escaped (a leading '.' too); names whose escaped form exceeds 200 bytes are stored under
// "~" + hex(the first 128 bits of SHA-256 of the name) + "-" + the first 120 escaped bytes, with
// the full name in a NAME file. A cryptographic hash, because a directory is shared by every name
// that maps to it: a linear checksum (earlier builds used crc32c and crc32; legacyDirName) lets
// anyone compute a second name for an existing ledger's directory.
func dirName(name string) (dir string, hashed bool) {
	s := escapeName(name)
	if len(s) <= 200 {
		return s, false
	}
	sum := sha256.Sum256([]byte(name))
	return "~" + hex.EncodeToString(sum[:16]) + "-" + s[:120], true
}

// legacyDirName is the directory name builds before the SHA-256 names gave a hashed name (one
// whose escaped form exceeds 200 bytes); their directories are still found (legacydirs.go).
func legacyDirName(name string) string {
	s := escapeName(name)
	return fmt.Sprintf("~%08x%08x-%s", crc([]byte(name)), crc32.ChecksumIEEE([]byte(name)), s[:min(len(s), 120)])
}

// escapeName is the %XX-escaped form of a ledger name.
func escapeName(name string) string {
	// Built by hand, not with fmt: every segment read and write derives its file's path from
	// the ledger's name (fmt.Fprintf per escaped byte was ~0.6 % of a catch-up's CPU).
	const hexDigits = "0123456789ABCDEF"
	b := make([]byte, 0, len(name)+16)
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || (c == '.' && i > 0) {
			b = append(b, c)
		} else {
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
		}
	}
	return string(b)
}

// nameFromDir reverses dirName for unhashed directories.
func nameFromDir(dir string) (string, bool) {
	if strings.HasPrefix(dir, "~") || dir == "" {
		return "", false
	}
	s, err := url.PathUnescape(dir)
	if err != nil {
		return "", false
	}
	if d, _ := dirName(s); d != dir {
		return "", false
	}
	return s, true
}
