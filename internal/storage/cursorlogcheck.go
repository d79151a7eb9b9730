package storage

import (
	"encoding/binary"
	"fmt"
	"io"
	"sort"

	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// Telling a torn cursor log from a damaged one.
//
// A cursor log is appended to behind the journal: every record in it that a checkpoint has not
// made durable is also in a journal file that recovery replays. So an invalid record is a crash
// outcome only where nothing durable follows it: at the end of the file (a torn tail), or, during
// the replay, in a part of the file that the replayed journal rewrites (unsynced appends may reach
// the disk out of order and leave a hole before records that did). Anything else (a bad header of
// a file with records, a bad record followed by a record the journal does not hold) is damage to
// durable states, and cutting the log there would silently reset or drop cursors and bring
// deleted ones back. Damage therefore stops the ledger: OpenLedger fails with ErrCorrupt naming
// the file, until the file is restored or `meridian repair --accept-loss` salvages every readable
// state from it (Repair). In SyncInterval mode cursor-log writes may run ahead of the durable
// journal, so a bad record followed by valid ones is also a crash outcome there and is cut, as a
// torn segment tail is.

// cursorLogRecord is one valid record of a cursor log and where it starts.
type cursorLogRecord struct {
	off  int64
	body []byte
}

// cursorLogScan is what a read of a whole cursor log found.
type cursorLogScan struct {
	size      int64
	headerErr error             // nil: the header is valid
	prefix    []cursorLogRecord // the valid records from the header on
	end       int64             // end of the last record of prefix (headerSize when none)
	bad       int64             // where prefix stops at an invalid record; -1 if the file ends cleanly
	// after: valid records found after bad (by trying every offset): durable states behind damage,
	// or, during replay, records of a hole in the unsynced part.
	after []cursorLogRecord
	// incomplete: the search for records after bad gave up (resyncBudget): whether durable
	// records follow is not known, which counts as damage.
	incomplete bool
}

// resyncBudget bounds the bytes checksummed while looking for records after a bad one in size
// bytes: the bytes there are property values or payloads, which clients choose, and each offset
// could claim a record of up to the rest of the file. Ordinary content (text: its bytes read as
// lengths beyond the file) costs almost nothing.
func resyncBudget(size int) int { return 64<<20 + 64*size }

// tornHeader says an invalid header is a creation the crash interrupted: the file is shorter
// than a header or starts with a header's worth of zeros, and no record follows.
func (s *cursorLogScan) tornHeader(data []byte) bool {
	return s.headerErr != nil && len(s.after) == 0 && !s.incomplete && (len(data) < headerSize || allZero(data[:headerSize]))
}

// damaged reports whether the log is damaged rather than torn (see the comment at the top);
// covered says whether a record after a bad one is rewritten by the journal replay (nil: none
// is).
func (s *cursorLogScan) damaged(data []byte, covered func(body []byte) bool) bool {
	if s.incomplete || s.garbageHeader(data) {
		return true
	}
	for _, r := range s.after {
		if covered == nil || !covered(r.body) {
			return true
		}
	}
	return false
}

// garbageHeader: the header is invalid and not zeros or short. A header is written whole, before
// any record, so that is damage whatever follows.
func (s *cursorLogScan) garbageHeader(data []byte) bool {
	return s.headerErr != nil && len(data) >= headerSize && !allZero(data[:headerSize])
}

// describe says what is wrong with a damaged log, for errors and the repair report.
func (s *cursorLogScan) describe() string {
	if s.incomplete {
		return fmt.Sprintf("bad record at offset %d of %d; whether readable records follow could not be told (the search for them gave up)", max(s.bad, 0), s.size)
	}
	if s.headerErr != nil {
		return fmt.Sprintf("header unreadable (%v) with %d readable records after it", s.headerErr, len(s.after))
	}
	return fmt.Sprintf("bad record at offset %d of %d with %d readable records after it", s.bad, s.size, len(s.after))
}

// validCursorRecord reports whether body is a well-formed cursor-log record body.
func validCursorRecord(body []byte) bool {
	if len(body) < 2 {
		return false
	}
	switch body[0] {
	case cState:
		_, err := decodeCursorState(body[1:])
		return err == nil
	case cDelete:
		return true
	}
	return false
}

// scanCursorLog reads a whole cursor log.
func scanCursorLog(data []byte) cursorLogScan {
	s := cursorLogScan{size: int64(len(data)), bad: -1}
	_, s.headerErr = parseHeader(data, magicCursors)
	off := 0
	if s.headerErr == nil {
		off = headerSize
		s.end = headerSize
		for off < len(data) {
			body, sz, err := decodeRecord(data[off:], nil)
			if err != nil || !validCursorRecord(body) {
				break
			}
			s.prefix = append(s.prefix, cursorLogRecord{int64(off), body})
			off += sz
			s.end = int64(off)
		}
		if off >= len(data) {
			return s
		}
		s.bad = int64(off)
	}
	// Look for readable records past the bad one (or the bad header), at every offset.
	budget := resyncBudget(len(data))
	for i := off + 1; i+recHeaderSize <= len(data); {
		n := int(binary.LittleEndian.Uint32(data[i:]))
		if n < 2 || n > len(data)-i-recHeaderSize || (data[i+recHeaderSize] != cState && data[i+recHeaderSize] != cDelete) {
			i++
			continue
		}
		if budget -= n; budget < 0 {
			s.incomplete = true
			break
		}
		body, sz, err := decodeRecord(data[i:], nil)
		if err != nil || !validCursorRecord(body) {
			i++
			continue
		}
		s.after = append(s.after, cursorLogRecord{int64(i), body})
		i += sz
	}
	return s
}

// readWholeFile reads the file at p.
func readWholeFile(fsys vfs.FS, p string) ([]byte, error) {
	f, err := fsys.OpenFile(p, vfs.ReadOnly)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	data := make([]byte, size)
	n, err := f.ReadAt(data, 0)
	if err != nil && err != io.EOF {
		return nil, err
	}
	return data[:n], nil
}

// cursorLogDamageError is the error that stops a ledger whose cursor log is damaged.
func cursorLogDamageError(name, p string, s *cursorLogScan) error {
	return fmt.Errorf("%w: ledger %q: cursor log %s: %s; its cursors are not loaded (restore the file, or accept the loss of the unreadable states with `meridian repair --accept-loss`)",
		ErrCorrupt, name, p, s.describe())
}

// applyCursorRecords applies cursor-log records in order to states (the last state of each
// cursor wins; a delete record removes it).
func applyCursorRecords(states map[string]*cursorState, recs []cursorLogRecord) {
	for _, r := range recs {
		switch r.body[0] {
		case cState:
			if st, err := decodeCursorState(r.body[1:]); err == nil {
				states[st.name] = st
			}
		case cDelete:
			delete(states, string(r.body[1:]))
		}
	}
}

// journalCursorBodies is the set of cursor-log bodies that the replayed journal files hold (by
// checksum and length): a record of a cursor log that is one of them is rewritten by the replay.
type journalCursorBodies map[[2]uint32]struct{}

func (j journalCursorBodies) add(body []byte) {
	j[[2]uint32{crc(body), uint32(len(body))}] = struct{}{}
}

func (j journalCursorBodies) has(body []byte) bool {
	_, ok := j[[2]uint32{crc(body), uint32(len(body))}]
	return ok
}

// sortedStateNames lists the names of states, sorted.
func sortedStateNames(states map[string]*cursorState) []string {
	names := make([]string, 0, len(states))
	for n := range states {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
