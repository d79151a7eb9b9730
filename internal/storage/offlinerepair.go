package storage

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"sort"
	"strings"

	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// Repair: the explicit way to accept a loss.
//
// Recovery repairs what a crash can leave behind (torn tails, holes the journal rewrites) and
// stops at anything else with an error naming the file: a damaged cursor log stops its ledger, a
// damaged or missing state or incarnations file stops Open, a FENCED marker or a segment damaged in
// the middle keeps a ledger read-only. Repair reports each of these, and with AcceptLoss fixes it,
// keeping everything that can still be read:
//
//   - a damaged cursor log is rewritten with the newest readable state of every cursor (the records
//     before and after the damage); a state only the damaged bytes held is lost: that cursor goes
//     back to an older state (redelivery), or is missing if it was created there, or comes back if
//     it was deleted there;
//   - a damaged segment (a bad record followed by valid ones, or non-zero bytes to its end:
//     classifyBadRecord) is cut at the bad record (the entries from there on are lost); a segment
//     a journal file to replay names is left to the replay (replayedSegments); a segment of
//     another format version is reported as refused and left as it is (Repair goes on with the
//     other files and returns the version error), as the state file of one is refused;
//   - a FENCED marker is removed (the entries it says are missing stay lost);
//   - a damaged incarnations file keeps its readable records (ids of an incarnation lost with the
//     rest are attributed to the one before it);
//   - a missing or damaged state file is rebuilt: the ledger id limit is one past the highest id
//     found anywhere (segment and index files, cursor states, incarnations, journal records), the
//     journal replays from its oldest file. Ids above the highest found that the lost state had
//     handed out (their data gone) may be handed out again: they belong to the new incarnation
//     of the next Open, so peers do not take them for the old ones.
//
// With AcceptLoss, Repair then opens the engine (which replays the journal), repeats the ledger
// checks for what the replay found, and opens every ledger it repaired to check that it loads. The
// broker must be stopped.

// RepairOptions configure Repair.
type RepairOptions struct {
	Dir string
	FS  vfs.FS // nil = the real OS filesystem
	// Ledger limits the ledger checks to one ledger ("" = every ledger). The state and
	// incarnations files are always checked.
	Ledger string
	// AcceptLoss repairs what was found; without it Repair only reports.
	AcceptLoss bool
	Logger     *slog.Logger
}

// RepairAction is one problem Repair found.
type RepairAction struct {
	File    string // the file (or directory) concerned
	Problem string // what is wrong
	Loss    string // what repairing it gives up
	Done    bool   // repaired (AcceptLoss)
	// Refused: Repair leaves the file as it is (a newer build's format); Repair's error says so.
	Refused bool
}

// RepairReport is what Repair found and did.
type RepairReport struct {
	Actions []RepairAction
	// Checked lists the ledgers whose files were checked; Loaded, with AcceptLoss, the result of
	// opening each afterwards (nil error: it loads).
	Checked []string
	Loaded  map[string]error
}

// Print writes the report for an operator.
func (r *RepairReport) Print(w io.Writer) {
	if len(r.Actions) == 0 {
		fmt.Fprintf(w, "nothing to repair (ledgers checked: %d)\n", len(r.Checked))
	}
	for _, a := range r.Actions {
		state := "found"
		switch {
		case a.Refused:
			state = "refused"
		case a.Done:
			state = "repaired"
		}
		fmt.Fprintf(w, "%s: %s\n  problem: %s\n  loss: %s\n", state, a.File, a.Problem, a.Loss)
	}
	names := make([]string, 0, len(r.Loaded))
	for n := range r.Loaded {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := r.Loaded[n]; err != nil {
			fmt.Fprintf(w, "ledger %q still does not load: %v\n", n, err)
		} else {
			fmt.Fprintf(w, "ledger %q loads\n", n)
		}
	}
}

// Repair checks a data directory and, with AcceptLoss, repairs it (see above).
func Repair(ctx context.Context, o RepairOptions) (*RepairReport, error) {
	if o.FS == nil {
		o.FS = vfs.OS{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if err := checkOptions(Options{Dir: o.Dir}); err != nil {
		return nil, err
	}
	if _, err := o.FS.Stat(o.Dir); err != nil {
		return nil, fmt.Errorf("storage: repair: %w", err)
	}
	rp := &repairer{o: o, e: repairEngine(o), report: &RepairReport{}}
	if err := rp.e.findLegacyDirs(); err != nil {
		return nil, err
	}
	if err := rp.checkFiles(); err != nil {
		return rp.report, err
	}
	if rp.refused != nil {
		// The replay would refuse such a file too: the checks after it are not run.
		return rp.report, rp.refused
	}
	if !o.AcceptLoss {
		return rp.report, nil
	}
	// The journal replay may find more (a FENCED marker); then every repaired ledger must load.
	if err := rp.openAndClose(ctx, nil); err != nil {
		return rp.report, err
	}
	if err := rp.checkLedgers(); err != nil {
		return rp.report, err
	}
	rp.report.Loaded = map[string]error{}
	err := rp.openAndClose(ctx, func(e *Engine) {
		for _, name := range rp.repaired {
			l, err := e.OpenLedger(ctx, name)
			if err == nil {
				err = l.Err()
			}
			rp.report.Loaded[name] = err
		}
	})
	return rp.report, err
}

type repairer struct {
	o        RepairOptions
	e        *Engine // paths and file helpers only: never opened
	report   *RepairReport
	repaired []string // ledgers with a repaired file
	// stateLost: the state file must be rebuilt; incarnations: readable records of the
	// incarnations file.
	stateLost    bool
	incarnations uint64
	refused      error // the first file refused (refuse)
}

// repairEngine is an Engine value that is never opened: its paths and file helpers.
func repairEngine(o RepairOptions) *Engine {
	dir := path.Clean(o.Dir)
	return &Engine{opts: Options{Dir: dir, FS: o.FS}, fs: o.FS, log: o.Logger.With("component", "storage-repair"),
		dir: dir, ledgersDir: dir + "/ledgers", journalDir: dir + "/journal", files: newFileCache(o.FS, 16)}
}

func (rp *repairer) add(a RepairAction) {
	a.Done = rp.o.AcceptLoss
	rp.report.Actions = append(rp.report.Actions, a)
}

// refuse reports file p, which Repair will not touch (err says why), and goes on with the other
// files; Repair returns the first such error once they are checked and repaired.
func (rp *repairer) refuse(p string, err error) {
	rp.report.Actions = append(rp.report.Actions, RepairAction{File: p, Problem: err.Error(),
		Loss: "none: the file is left as it is", Refused: true})
	if rp.refused == nil {
		rp.refused = err
	}
}

func (rp *repairer) noteRepaired(name string) {
	for _, n := range rp.repaired {
		if n == name {
			return
		}
	}
	rp.repaired = append(rp.repaired, name)
}

// checkFiles checks (and repairs) the state and incarnations files and the ledgers' files.
func (rp *repairer) checkFiles() error {
	if err := rp.checkState(); err != nil {
		return err
	}
	if err := rp.checkLedgers(); err != nil {
		return err
	}
	if rp.stateLost && rp.o.AcceptLoss {
		return rp.rebuildState()
	}
	return nil
}

// checkState checks the state and incarnations files.
func (rp *repairer) checkState() error {
	e := rp.e
	p := e.dir + "/" + stateFile
	var st engineState
	data, err := readWholeFile(e.fs, p)
	switch {
	case vfs.IsNotExist(err):
		if herr := e.refuseMissingState(); herr != nil {
			rp.stateLost = true
			rp.add(RepairAction{File: p, Problem: "missing over existing data",
				Loss: "rebuilt: the ledger id limit becomes one past the highest id found on disk; ids above it that the lost file had handed out (their data gone) may be handed out again, under a new incarnation"})
		}
	case err != nil:
		return fmt.Errorf("storage: repair: read %s: %w", p, err)
	default:
		st, err = decodeEngineState(data)
		if errors.Is(err, errUnsupportedVersion) {
			return fmt.Errorf("storage: repair: %s: %w (use the build that wrote it)", p, err)
		}
		if err != nil {
			rp.stateLost = true
			rp.add(RepairAction{File: p, Problem: fmt.Sprintf("unreadable: %v", err),
				Loss: "rebuilt as for a missing file: ledger id limit from the highest id found on disk, journal replayed from its oldest file"})
		}
	}
	durable := st.incarnations
	if rp.stateLost {
		durable = 0
	}
	return rp.checkIncarnations(durable)
}

// checkIncarnations keeps the readable records of a damaged incarnations file.
func (rp *repairer) checkIncarnations(durable uint64) error {
	e := rp.e
	p := e.dir + "/" + incarnationsFile
	recs, _, _, err := e.readIncarnations(p, durable)
	if err == nil || !errors.Is(err, ErrCorrupt) {
		rp.incarnations = uint64(len(recs))
		return err
	}
	data, rerr := readWholeFile(e.fs, p)
	if rerr != nil && !vfs.IsNotExist(rerr) {
		return fmt.Errorf("storage: repair: read %s: %w", p, rerr)
	}
	keep := appendHeader(nil, magicIncarn, 0)
	n := 0
	if _, herr := parseHeader(data, magicIncarn); herr == nil {
		for off := headerSize; off < len(data); {
			body, sz, err := decodeRecord(data[off:], nil)
			if err != nil || len(body) != 16 {
				break
			}
			keep = append(keep, data[off:off+sz]...)
			off += sz
			n++
		}
	}
	rp.add(RepairAction{File: p, Problem: err.Error(),
		Loss: fmt.Sprintf("the %d readable records before the damage are kept; ledger ids of incarnations recorded after them are attributed to the last one kept", n)})
	rp.incarnations = uint64(n)
	// The state file must count what is kept.
	rp.stateLost = true
	if !rp.o.AcceptLoss {
		return nil
	}
	return replaceFile(e.fs, p, keep)
}

// checkLedgers checks the cursor logs, FENCED markers and segments of the ledgers.
func (rp *repairer) checkLedgers() error {
	e := rp.e
	var dirs []string
	if rp.o.Ledger != "" {
		dirs = []string{e.ledgerDir(rp.o.Ledger)}
	} else {
		des, err := e.fs.ReadDir(e.ledgersDir)
		if err != nil && !vfs.IsNotExist(err) {
			return fmt.Errorf("storage: repair: list %s: %w", e.ledgersDir, err)
		}
		for _, de := range des {
			if de.IsDir && !isTransferDir(de.Name) { // (an unfinished import or replace: Open resolves it)
				dirs = append(dirs, e.ledgersDir+"/"+de.Name)
			}
		}
	}
	replayed, err := rp.replayedSegments()
	if err != nil {
		return err
	}
	rp.report.Checked = rp.report.Checked[:0]
	for _, dir := range dirs {
		name := rp.ledgerName(dir)
		rp.report.Checked = append(rp.report.Checked, name)
		if err := rp.checkLedger(name, dir, replayed); err != nil {
			return err
		}
	}
	return nil
}

// replayedSegments are the segments that the journal files recovery replays name. After a crash
// such a segment may end torn, with garbage, or with a hole before direct writes that were
// acknowledged: the replay writes the journal's entries over it and keeps what follows, so the
// record checks leave it to the replay (with AcceptLoss, the checks after the replay see what it
// left). A state file that does not read replays every journal file, as its rebuild does.
func (rp *repairer) replayedSegments() (map[int64]bool, error) {
	e := rp.e
	var first uint64
	if data, err := readWholeFile(e.fs, e.dir+"/"+stateFile); err == nil {
		if st, err := decodeEngineState(data); err == nil {
			first = st.firstJournal
		}
	}
	des, err := e.fs.ReadDir(e.journalDir)
	if err != nil && !vfs.IsNotExist(err) {
		return nil, fmt.Errorf("storage: repair: list journal: %w", err)
	}
	named := map[int64]bool{}
	for _, de := range des {
		if seq, ok := parseHexName(de.Name, ".jnl"); ok && uint64(seq) >= first {
			journalLedgerIDs(e, uint64(seq), func(id int64) { named[id] = true })
		}
	}
	return named, nil
}

// ledgerName is the name of the ledger in directory dir (its NAME file for hashed names).
func (rp *repairer) ledgerName(dir string) string {
	if rp.o.Ledger != "" {
		return rp.o.Ledger
	}
	base := path.Base(dir)
	if n, ok := nameFromDir(base); ok {
		return n
	}
	if n, err := rp.e.readNameFile(dir); err == nil {
		return n
	}
	return base
}

func (rp *repairer) checkLedger(name, dir string, replayed map[int64]bool) error {
	e := rp.e
	des, err := e.fs.ReadDir(dir)
	if vfs.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("storage: repair: list %s: %w", dir, err)
	}
	for _, de := range des {
		p := dir + "/" + de.Name
		switch {
		case de.Name == "FENCED":
			why, _ := readWholeFile(e.fs, p)
			rp.add(RepairAction{File: p, Problem: fmt.Sprintf("ledger %q fenced by recovery: %s", name, strings.TrimSpace(string(why))),
				Loss: "the marker is removed: the entries it says are missing stay lost, the ledger takes appends again after them"})
			rp.noteRepaired(name)
			if rp.o.AcceptLoss {
				if err := e.fs.Remove(p); err != nil {
					return fmt.Errorf("storage: repair: %w", err)
				}
				if err := e.fs.SyncDir(dir); err != nil {
					return fmt.Errorf("storage: repair: %w", err)
				}
			}
		case de.Name == "cursors.log":
			if err := rp.checkCursorLog(name, p); err != nil {
				return err
			}
		default:
			if id, ok := parseHexName(de.Name, ".seg"); ok {
				if err := rp.checkSegment(name, dir, id, replayed[id]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// checkCursorLog salvages a damaged cursor log: the newest readable state of every cursor.
func (rp *repairer) checkCursorLog(name, p string) error {
	data, err := readWholeFile(rp.e.fs, p)
	if err != nil {
		return fmt.Errorf("storage: repair: read %s: %w", p, err)
	}
	scan := scanCursorLog(data)
	if !scan.damaged(data, nil) {
		return nil
	}
	states := map[string]*cursorState{}
	applyCursorRecords(states, scan.prefix)
	applyCursorRecords(states, scan.after)
	var kept []string
	body := appendHeader(nil, magicCursors, 0)
	for _, n := range sortedStateNames(states) {
		kept = append(kept, fmt.Sprintf("%s at %s", n, states[n].markDelete))
		body = appendPlainRecord(body, encodeCursorState([]byte{cState}, states[n]))
	}
	from := scan.bad
	if scan.headerErr != nil {
		from = 0
	}
	unreadable := scan.size - from
	if len(scan.after) > 0 {
		unreadable = scan.after[0].off - from
	}
	rp.add(RepairAction{File: p, Problem: fmt.Sprintf("ledger %q: %s", name, scan.describe()),
		Loss: fmt.Sprintf("%d unreadable bytes from offset %d are dropped; a cursor whose newest state was there goes back to an older one (redelivery), one created there is missing, one deleted there comes back; kept: %s",
			unreadable, from, strings.Join(kept, ", "))})
	rp.noteRepaired(name)
	if !rp.o.AcceptLoss {
		return nil
	}
	return replaceFile(rp.e.fs, p, body)
}

// checkSegment cuts a segment at a damaged record (one that loading fences the ledger for:
// classifyBadRecord), and refuses a segment of another format version. A segment the journal
// replay repairs (replayed) is left to it.
func (rp *repairer) checkSegment(name, dir string, id int64, replayed bool) error {
	e := rp.e
	p := segPath(dir, id)
	f, err := e.fs.OpenFile(p, vfs.ReadWrite)
	if err != nil {
		return fmt.Errorf("storage: repair: open %s: %w", p, err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return fmt.Errorf("storage: repair: %s: %w", p, err)
	}
	hdr := make([]byte, headerSize)
	if n, _ := f.ReadAt(hdr, 0); n < headerSize {
		return nil
	}
	if hid, herr := parseHeader(hdr, magicSegment); herr != nil || int64(hid) != id {
		if errors.Is(herr, errUnsupportedVersion) {
			// A newer build's segment, not damage: as for the state file, nothing is removed.
			rp.refuse(p, fmt.Errorf("storage: repair: %s: %w (use the build that wrote it)", p, herr))
			return nil
		}
		if replayed {
			return nil
		}
		lost := false
		if herr != nil {
			if lost, err = entryZeroFollowsHeader(f, size); err != nil {
				return fmt.Errorf("storage: repair: scan %s: %w", p, err)
			}
		}
		if !lost {
			rp.add(RepairAction{File: p, Problem: fmt.Sprintf("ledger %q: segment header unreadable or of another id", name),
				Loss: "the segment is removed with all its entries"})
			rp.noteRepaired(name)
			if rp.o.AcceptLoss {
				return rp.removeSegment(dir, id)
			}
			return nil
		}
		// Only the header is damaged (entry 0 follows it): loading writes it again. The records
		// are checked below as in any segment.
	}
	if replayed {
		return nil
	}
	var entries int64
	bad, err := scanRecords(f, headerSize, size, func(_ int64, body []byte) bool {
		eid, _, _, err := parseSegBody(body)
		if err != nil || eid != entries {
			return false
		}
		entries++
		return true
	})
	if err != nil {
		return fmt.Errorf("storage: repair: scan %s: %w", p, err)
	}
	verdict := classifyBadRecord(f, bad, size, false)
	if !verdict.damaged() {
		return nil // clean, or padding or a torn tail that loading cuts
	}
	rp.add(RepairAction{File: p, Problem: fmt.Sprintf("ledger %q: %s", name, verdict.describe(bad, size, entries)),
		Loss: fmt.Sprintf("entries from %d:%d on (%d bytes) are cut", id, entries, size-bad)})
	rp.noteRepaired(name)
	if !rp.o.AcceptLoss {
		return nil
	}
	if err := f.Truncate(bad); err != nil {
		return fmt.Errorf("storage: repair: truncate %s: %w", p, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("storage: repair: sync %s: %w", p, err)
	}
	if err := e.fs.Remove(idxPath(dir, id)); err != nil && !vfs.IsNotExist(err) {
		return fmt.Errorf("storage: repair: %w", err)
	}
	return e.fs.SyncDir(dir)
}

func (rp *repairer) removeSegment(dir string, id int64) error {
	for _, p := range []string{segPath(dir, id), idxPath(dir, id)} {
		if err := rp.e.fs.Remove(p); err != nil && !vfs.IsNotExist(err) {
			return fmt.Errorf("storage: repair: %w", err)
		}
	}
	return rp.e.fs.SyncDir(dir)
}

// rebuildState writes a state file whose ledger id limit is one past the highest id found.
func (rp *repairer) rebuildState() error {
	e := rp.e
	maxID, err := rp.highestLedgerID()
	if err != nil {
		return err
	}
	first, err := rp.firstJournalToReplay()
	if err != nil {
		return err
	}
	e.ledgerIDLimit = maxID + 1
	e.firstJournal = first
	e.inc.durable = rp.incarnations
	if err := e.writeState(); err != nil {
		return err
	}
	rp.add(RepairAction{File: e.dir + "/" + stateFile, Problem: "written anew",
		Loss: fmt.Sprintf("ledger id limit %d (one past the highest id found), journal replayed from file %d, %d incarnation records", maxID+1, first, rp.incarnations)})
	return nil
}

// highestLedgerID is the highest ledger id named anywhere in the data directory: segment and
// index files, cursor states, the incarnations file, journal records.
func (rp *repairer) highestLedgerID() (int64, error) {
	e := rp.e
	var maxID int64
	note := func(id int64) { maxID = max(maxID, id) }
	recs, _, _, err := e.readIncarnations(e.dir+"/"+incarnationsFile, 0)
	if err != nil {
		return 0, err
	}
	for _, r := range recs {
		note(r.firstLedgerID - 1)
	}
	des, err := e.fs.ReadDir(e.ledgersDir)
	if err != nil && !vfs.IsNotExist(err) {
		return 0, fmt.Errorf("storage: repair: list %s: %w", e.ledgersDir, err)
	}
	for _, de := range des {
		dir := e.ledgersDir + "/" + de.Name
		files, err := e.fs.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, f := range files {
			if id, ok := parseHexName(f.Name, ".seg"); ok {
				note(id)
			} else if id, ok := parseHexName(f.Name, ".idx"); ok {
				note(id)
			}
		}
		if data, err := readWholeFile(e.fs, cursorLogPath(dir)); err == nil {
			scan := scanCursorLog(data)
			states := map[string]*cursorState{}
			applyCursorRecords(states, append(scan.prefix, scan.after...))
			for _, st := range states {
				note(st.markDelete.LedgerID)
				for _, r := range st.acked {
					note(r.ledger)
				}
				for p := range st.batches {
					note(p.LedgerID)
				}
			}
		}
	}
	jdes, err := e.fs.ReadDir(e.journalDir)
	if err != nil && !vfs.IsNotExist(err) {
		return 0, fmt.Errorf("storage: repair: list %s: %w", e.journalDir, err)
	}
	for _, de := range jdes {
		if seq, ok := parseHexName(de.Name, ".jnl"); ok {
			journalLedgerIDs(e, uint64(seq), note)
		}
	}
	return maxID, nil
}

// journalLedgerIDs calls note with every ledger id the readable records of journal file seq name.
func journalLedgerIDs(e *Engine, seq uint64, note func(int64)) {
	data, err := readWholeFile(e.fs, e.journalPath(seq))
	if err != nil {
		return
	}
	hseq, _, seed, err := parseJournalHeader(data)
	if err != nil || hseq != seq {
		return
	}
	for off := headerSize; off < len(data); {
		body, sz, err := decodeJournalRecord(data[off:], seed)
		if err != nil || body[0] == jEnd {
			return
		}
		off += sz
		if len(body) < 5+8 {
			continue
		}
		switch rest := body[5:]; body[0] {
		case jEntry, jEntryRef, jDirectStart, jTrim:
			note(int64(binary.LittleEndian.Uint64(rest)))
		case jVoid:
			for ; len(rest) >= 16; rest = rest[16:] {
				note(int64(binary.LittleEndian.Uint64(rest)))
			}
		}
	}
}

// firstJournalToReplay is the oldest journal file present, or one past the highest sequence
// number of a recycled file when there is none (a recycled file's old records are checksummed
// with its old sequence number, which must not be used again).
func (rp *repairer) firstJournalToReplay() (uint64, error) {
	des, err := rp.e.fs.ReadDir(rp.e.journalDir)
	if err != nil && !vfs.IsNotExist(err) {
		return 0, fmt.Errorf("storage: repair: list journal: %w", err)
	}
	var lowest, highest uint64
	for _, de := range des {
		if seq, ok := parseHexName(de.Name, ".jnl"); ok && (lowest == 0 || uint64(seq) < lowest) {
			lowest = uint64(seq)
		}
		if seq, ok := parseHexName(de.Name, ".free"); ok {
			highest = max(highest, uint64(seq))
		}
	}
	if lowest > 0 {
		return lowest, nil
	}
	return highest + 1, nil
}

// openAndClose opens the engine (replaying the journal), runs check and closes it.
func (rp *repairer) openAndClose(ctx context.Context, check func(*Engine)) error {
	e, err := Open(ctx, Options{Dir: rp.o.Dir, FS: rp.o.FS, Logger: rp.o.Logger})
	if err != nil {
		return fmt.Errorf("storage: repair: open after the repair: %w", err)
	}
	if check != nil {
		check(e)
	}
	return e.Close()
}

// replaceFile replaces p's content atomically (replaceFileDurably, with a tmp name of its own).
func replaceFile(fsys vfs.FS, p string, b []byte) error {
	if err := replaceFileDurably(fsys, p, p+".repair", b); err != nil {
		return fmt.Errorf("storage: repair: write %s: %w", p, err)
	}
	return nil
}
