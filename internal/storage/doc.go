// Package storage is Meridian's storage engine: durable, append-only topic ledgers with group
// commit, cursors, trimming and retention, a broker-wide entry cache and crash recovery.
//
// # Model
//
// An Engine owns one data directory. A Ledger is one topic's (or partition's) log; it is a
// sequence of segments, each with its own ledger id (a broker-wide counter, never reused), holding
// entries 0..n-1. Positions (ledgerId, entryId) therefore increase strictly, also across restarts:
// every OpenLedger and every Roll starts a new ledger id. A Cursor is a subscription's state:
// a mark-delete position, individually acknowledged ranges after it, partially acknowledged
// batches and string properties.
//
// # Write path and durability
//
// Every change (entry, cursor state, trim, delete) is first a record in the broker-wide journal.
// Appenders of all ledgers encode their records into one shared batch; one sync loop writes the
// batch to the journal with a single write and a single fsync (group commit), then makes the
// entries visible, completes the callbacks in append order, and writes the entries into their
// ledgers' segment files (one write per segment per batch; a reader that needs the file for an
// entry not yet written waits for that write; applier.go, Engine.apply). So in SyncAlways mode an
// append is acknowledged only after its journal record is fsynced, and a segment file never
// holds an entry whose journal record is not durable. In SyncAlways mode the sync loop does not
// wait for a group commit's fsync before it writes the next batch: up to SyncPipelineDepth
// (default 2) fsyncs run at once on commit syncer goroutines, and batches are still handed on
// only after their own fsync and in order; if one fails, every batch in flight fails
// (pipelinesync.go explains why this keeps the guarantee). Under a light load, with nothing in
// flight, the sync loop runs the fsync and the apply itself instead (commitLight, applyOnSyncLoop):
// the hand-offs would cost more than the overlap saves. In SyncInterval mode the callbacks run
// after the write and the journal is fsynced every SyncInterval (shown in EngineMetrics) by a
// background syncer goroutine, so a stalled fsync never holds up the group commits behind it; a
// rotated journal file is fsynced and closed by that syncer too, and the file opened while that
// fsync is in flight carries the "previous file may end torn" flag (see intervalsync.go).
//
// Segment pages leave the page cache once they are on the device (vfs.DropCache: the applier's
// paced writeback drops what it handed to the device before, a direct write what was written
// before it, a checkpoint the rest of each file it fsyncs): written once and read back only by
// readers behind the entry cache, they would otherwise keep memory that the next write could have
// reused; fresh memory is several times dearer to write into (docs/storage.md, "Page cache").
// Segment writes and reads of at least BypassCacheBytes (default 64 KiB) do not use the page
// cache at all (O_DIRECT of whole 4 KiB blocks; unbuffered.go), where the file system allows it.
//
// When a journal file exceeds JournalFileBytes the sync loop starts the next one and hands the
// set of files written since to the checkpointer, which fsyncs them (16 in parallel) and their
// directories, records in the state file that recovery starts after that journal file, and
// deletes it. Recovery therefore replays at most about one journal file (plus the one being
// checkpointed) — time proportional to the unflushed tail, not to the data.
//
// A failed journal write or fsync fences every ledger with records in that batch (and, in
// SyncInterval mode, every ledger with acknowledged unsynced appends): their appends fail from
// then on, Err() reports it, and the owner closes and reopens the ledger, which reloads it from
// disk. The journal file is abandoned (never written again); the next one carries a flag saying
// its predecessor may end torn. A void record tells recovery that the fenced ledger's later
// records were never acknowledged.
//
// A failed fsync is never retried to make data durable (after a writeback error Linux marks the
// pages clean and reports the error once per open file description). A segment or cursor file
// whose fsync failed, or a segment write that failed after its entries were acknowledged, makes the
// file a repair target (repair.go): its ledger is fenced, no checkpoint retires a journal file
// until the applier has rewritten the file from the journal (or the cursors in memory) and fsynced
// it, and the checkpointer retries by itself, so the engine recovers without a restart once the
// disk works again. Engine.Health reports it meanwhile; past MaxJournalBacklog appends fail with
// ErrUnavailable, or, when nothing failed and checkpoints are only slow, wait (health.go).
//
// # Recovery
//
// Open replays the journal files after the checkpoint in order. An entry record is applied to
// its segment file, written again in place when the segment already holds it (idempotent; the
// page cache of a restarted process may show data that is not on disk: replayrewrite.go), and
// every ledger directory the replay touches is fsynced with the files; a segment whose tail is
// torn is truncated at the first bad record when the journal holds that entry (and rewritten
// from it). A torn record at the end of the last journal file (or of an abandoned one) ends the
// replay of that file: it was never acknowledged. A bad record in the middle of the journal
// fails Open with ErrCorrupt. A segment named by a void record is cut where its first voided
// entry starts, whether that entry's record is complete or torn (the write of an entry that was
// never acknowledged, interrupted by the crash). A gap — the journal continues a segment past
// entries the segment does not hold (entries from a void record's first voided one on are never
// applied, so they make no gap), without a later
// trim of that segment in the replayed journal (a trim whose file removal became durable before
// the crash leaves the segment's replayed entries nowhere to go) — writes a FENCED marker into
// the ledger's directory: that ledger opens fenced (readable, not writable) and the log says why. Loading a ledger scans
// segments without a valid index file; a bad record with valid records after it fences the
// ledger (never silently skipped), and so does, in SyncAlways mode, any bad record the journal did
// not repair unless only zeros or a partial record header follow it (a torn tail, truncated and
// counted in RecoveredTornTails); in SyncInterval mode a torn segment tail is truncated. A
// missing state file over existing ledgers or journal records fails Open with ErrCorrupt naming
// it (statecheck.go): the ledger id counter would otherwise start over below ids in use.
//
// # Cursors
//
// Durable cursor states are written as journal records every CursorFlushInterval (1 s) for
// the cursors that changed, and on Flush, DeleteCursor, Ledger.Close and creation. After a crash
// a cursor is therefore at most one interval (plus one group commit) behind the acknowledgements
// it received: entries are redelivered, never skipped. At most 10,000 individually acknowledged
// ranges are persisted per cursor, and at most 10,000 partially acknowledged batches with 4 MiB
// of bitsets (beyond them, acknowledgements are kept in memory only). Every bound the reader
// applies to a cursor state is applied when it is written (cursorlimits.go): AckBatchIndexes
// refuses a batch over MaxAckBatchSize, SetProperties properties over MaxCursorPropertiesBytes,
// both with ErrCursorStateTooLarge. The
// sync loop appends the records to the ledger's cursor log; on load the last valid state of
// each cursor wins and is reconciled with the stored entries: a mark-delete position after the
// last entry is clamped to it (possible only after losing unsynced data in SyncInterval mode),
// one before the first stored entry moves up to it, acknowledgements of entries that are not
// stored are dropped. A mostly-superseded cursor log is rewritten (tmp file, fsync, rename,
// directory fsync). A torn tail of a cursor log is cut; damage to durable records (a bad header
// of a file with records, a bad record followed by one the replayed journal does not hold) stops
// the ledger: OpenLedger fails with ErrCorrupt naming the file (cursorlogcheck.go), until the file
// is restored or Repair salvages it (repair.go, `meridian repair --accept-loss`).
//
// # Trimming
//
// Trim removes whole sealed segments whose entries every durable cursor has consumed by its
// persisted mark-delete position (trimposition.go; replication cursors are ordinary durable
// cursors) once retention allows: with retention
// (maxAge, maxBytes), -1 meaning infinite and 0 none (Pulsar's semantics), a consumed segment is
// removed when it is older than maxAge (by its newest publish time) or the ledger is larger than
// maxBytes; (-1, -1) keeps everything. The current segment is never removed. A trim is a journal
// record first, so recovery never resurrects a removed segment. The applier renames a trimmed
// segment (and a deleted ledger's directory) into <dir>/trash, and the janitor goroutine unlinks
// it there, so that another topic's receipts never wait for a large unlink (janitor.go); the
// trash is emptied at Open.
//
// # Direct writes
//
// In SyncAlways mode, when one ledger's entries in one group commit reach DirectWriteBytes
// (default 1 MiB), the sync loop writes them once, straight to the end of the ledger's segment
// file, and the journal gets a reference record (type 10) instead of the entries; the commit then
// fdatasyncs that segment file in parallel with the journal, and the batch is acknowledged after
// both. Before the first direct write to a segment in a journal file, a direct-start record (type
// 11) for it is made durable in that file, and every earlier entry of the segment is already in
// the file. Recovery checks each reference against the segment (a reference to entries the
// segment does not hold was never acknowledged: the ledger id is voided from the first missing
// entry and the segment truncated there), truncates every segment named by a direct-start record
// after its last valid entry, and truncates a segment at its first voided entry (a failed batch's
// direct data). directwrite.go explains why this keeps every acknowledged entry.
//
// # Moving a ledger to another engine
//
// When a topic moves to another broker of the cluster, its ledger is copied with the same
// positions, so message ids, acknowledgements and every cursor stay valid (transfer_export.go,
// transfer_import.go). Ledger.Export seals the current segment and reports the non-empty segments
// (id, incarnation, entries) and the durable cursors' states; non-durable cursors are not
// exported. The entries are read with Ledger.Read. On the other engine, ImportLedger reserves the
// name (OpenLedger fails with ErrImporting meanwhile; an existing ledger must be deleted first),
// StartSegment and Append write each segment from entry 0 (a segment always starts at entry 0:
// trimming removes whole segments) in the segment record format, with an index file when large
// enough, and SetCursors checks the cursor records as the cursor log's reader and writer would.
// All of it goes into a staging directory, ledgers/.import-<incarnation>-<n>. Commit fsyncs it,
// raises the ledger id counter above every imported id (through LedgerIDBlock when set; recorded
// in the state file), and, when the name's earlier ledger was deleted in a journal file no
// checkpoint has retired yet, rotates the journal and waits for that checkpoint (its records
// replayed onto the imported directory would overwrite or delete it); then it renames the staging
// directory into place and fsyncs ledgers/. The journal holds nothing of the import. Open removes
// staging directories left by a crash. Imported segments keep their incarnation in the ledger's
// INCARNATIONS file (Ledger.IncarnationOf; Read reports it with every entry).
//
// A broker that comes back gets its topics back with the segments another broker wrote
// meanwhile, while its own ledger of that name still holds its older ones (transfer_replace.go,
// transfer_merge.go). ImportLedgerReplacing is an import whose Commit replaces the ledger of that
// name: the node feeds it both sides' segments in id order (each with its incarnation,
// Ledger.IncarnationOf for the local ones, so INCARNATIONS describes them all), the cursor
// records MergeCursorRecords computes from both exports (each side's acknowledgements speak for
// its own segments only), closes its local ledger, and commits. Commit then always waits for a
// checkpoint to retire the journal files written so far (the old ledger's records must never be
// replayed into the new directory), renames the old directory to ledgers/.replaced-<dir> and
// fsyncs ledgers/, renames the staging directory to <dir> and fsyncs ledgers/ (the commit), and
// removes the .replaced- directory. Open removes a .replaced- directory whose ledger directory
// exists and renames it back otherwise, so a crash at any step leaves the old ledger whole or
// the new one whole. One whose removal failed is moved into the trash by a delete of the ledger,
// ahead of the ledger's directory, so that it never outlives it.
//
// # Files (format version 1; journal files version 4; the state file version 2)
//
// All integers are little-endian. Every file starts with a 32-byte header:
//
//	offset size field
//	0      8    magic: "MRDN-SEG" segment, "MRDN-JNL" journal, "MRDN-CUR" cursor log,
//	            "MRDN-IDX" segment index, "MRDN-STA" engine state, "MRDN-INC" incarnations,
//	            "MRDN-IMP" imported segments' incarnations
//	8      4    format version (1; journal files written by this build: 4, versions 1-3 are still read;
//	            the state file: 2, version 1 is still read)
//	12     4    flags (journal: bit 0 = the previous journal file was abandoned and may end torn)
//	16     8    id (segment and index: ledger id; journal: sequence number; others 0)
//	24     4    reserved, 0
//	28     4    CRC-32C (Castagnoli) of bytes 0..27
//
// After the header, files hold records:
//
//	offset size field
//	0      4    body length n
//	4      4    CRC-32C of the body; in a journal file of version 2 or later, of the file's sequence
//	            number (u64, the header's id) followed by the body
//	8      n    body
//
// Directory layout under Options.Dir:
//
//	meridian.state                 engine state (replaced atomically: write .tmp, fsync, rename, fsync dir)
//	incarnations                   one record per Open: its incarnation and first ledger id (append-only)
//	journal/<seq %016x>.jnl        journal files
//	journal/<seq %016x>.free       retired journal files kept for reuse (at most 2; any content)
//	ledgers/<name>/                one directory per ledger; <name> is the ledger name with bytes
//	                               outside [A-Za-z0-9._-] (and a leading '.') written as %XX; names
//	                               longer than 200 escaped bytes use "~" + hex(first 128 bits of
//	                               SHA-256 of the name) + "-" + the first 120 escaped bytes, with
//	                               the full name in NAME (loading checks it); directories of earlier
//	                               builds, "~" + hex(crc32c) + hex(crc32) + "-" + 120 bytes, are
//	                               still used by the ledger their NAME names (legacydirs.go)
//	ledgers/<name>/<id %016x>.seg  segment of ledger id <id>
//	ledgers/<name>/<id %016x>.idx  its index (sealed segments of at least 1 MiB; derived, rebuilt if absent or stale)
//	ledgers/<name>/cursors.log     cursor log
//	ledgers/<name>/FENCED          present if recovery fenced the ledger; holds the reason
//	ledgers/<name>/INCARNATIONS    the incarnations of imported segments (written once, at the import)
//	ledgers/.import-<inc>-<n>/     a ledger import being written; removed at Open
//	ledgers/.replaced-<dir>/       a ledger being replaced by an import; at Open removed if
//	                               ledgers/<dir> exists, renamed back to it otherwise
//	trash/<incarnation %016x>-<n>  a deleted ledger's directory or a trimmed segment, until unlinked
//
// Engine state body (24 bytes; 16 in version 1, without the last field): ledger-id limit u64 (ids
// below it may have been handed out; ids are reserved 4,096 at a time and the next run starts at
// the limit), first journal sequence to replay u64, number of durable records in the incarnations
// file u64.
//
// Incarnations record body (16 bytes): incarnation u64 (random, non-zero), first ledger id u64.
// Every Open appends one (fsync; directory fsync when it creates the file) after the journal
// replay and before it hands out any ledger id, then writes the state file with the new count.
// Ledger ids from a record's first id up to the next record's belong to its incarnation; ids
// below the first record's belong to incarnation 0 (handed out before incarnations were
// recorded). Fewer valid records than the state file counts, or a bad record followed by a valid
// one, is ErrCorrupt naming the file; a bad record after the counted ones is the torn tail of an
// open that crashed while recording its incarnation and is cut (incarnation.go).
//
// Imported segments' incarnations (INCARNATIONS): one record whose body is, per imported segment
// in ascending id order, ledger id u64 and incarnation u64. A damaged file fails the ledger's load
// with ErrCorrupt naming it.
//
// Segment record body: entry id u64, publish time i64 (unix ms), entry data. Entries are
// consecutive from 0. A segment file written around the page cache (unbuffered.go) may end with
// zeros after its last record, fewer than 4,096, up to a 4,096-byte boundary that ends the file:
// padding, not data; it is cut when the segment is sealed or next loaded (a torn tail is any other
// invalid end). Format version unchanged: earlier versions read such a file as one with a torn
// tail of zeros, which they cut too.
//
// Journal record body: type u8, ledger slot u32 (a number the engine gives each open ledger;
// meaningful only within one journal file), then by type:
//
//	1 entry     ledger id u64, then a complete segment record (header and body) as above
//	2 announce  the ledger's name (precedes the first record of that slot in each journal file)
//	3 cursor    a cursor-log body of type 1 (below)
//	4 delcursor a cursor-log body of type 2 (below)
//	5 trim      ledger id u64: that segment and its index are removed
//	6 delledger the ledger's directory is removed
//	7 void      the ledger was fenced: pairs of (ledger id u64, first entry u64); entries of that
//	            ledger id from that entry on were never acknowledged and are not replayed
//	8 create    the ledger was created: its directory exists from now on
//	9 end       (slot 0) the last record of a rotated version-2 journal file
//	10 entryref ledger id u64, first entry u64, count u32, file offset u64, length u64: entries
//	            first..first+count-1 were written directly to that segment at that offset, as
//	            length bytes of segment records (version 4)
//	11 directstart ledger id u64: that segment may get direct writes from here on in this journal
//	            file; after replay it is truncated after its last valid entry (version 4)
//
// Journal files are recycled: a file recovery no longer needs is renamed to .free, and a new
// journal file is a free one renamed to its sequence and overwritten from offset 0 (header, fsync,
// directory fsync, then records), so the group commit's fdatasync changes no file-system metadata.
// Bytes after the last record written belong to the file's previous use; the seeded checksums
// reject them, and replay of a file that is not the last stops at its end record (a bad record
// before it is corruption unless the next file says this one was abandoned). A journal file whose
// valid header carries another sequence number is a recycled file whose new header never became
// durable, so nothing was written to it: it is skipped. So is a journal file whose header is
// invalid (torn: its fsync failed and a later directory fsync made its new name durable) unless a
// record valid for its sequence number starts right after the header: records are written only
// once the header is durable, so an invalid header before such a record is corruption (ErrCorrupt).
// A journal record body is never empty (type and slot): zeros, which read as a record of body
// length 0 with checksum 0 (the seeded checksum of an empty body for about one sequence number in
// 2^32), are an invalid record like any other.
//
// Journal files are zero-filled before use (nextjournal.go, "Journal files are made full size"),
// so that group commits overwrite allocated blocks even in a fresh data directory. A journal file
// is therefore laid out as:
//
//	offset      size  content
//	0           32    header (id = sequence number; flags bit 0 as above)
//	32          r     records back to back; a rotated file's last one is an end record (type 9)
//	32+r        rest  up to the file's size: zeros (written by the fill, which starts at the size
//	                  the file had: 0 for a new file) and/or bytes of the file's previous use
//	                  (recycled); a filled file is JournalFileBytes long, longer when its records
//	                  ran past that size, shorter when the fill was cut short (the sync loop needed
//	                  the file first) or the file was made inline without a fill
//
// Neither kind of tail forms a valid record (stale records fail the checksum seeded with the new
// sequence number; zeros are an empty record), so the tail is told from records exactly as a torn
// tail is: replay of the last file (and of a file the next one says was abandoned) stops silently
// at the first invalid record, whatever follows it; in any other file replay stops at the end
// record, and an invalid record before it is ErrCorrupt (so is a file that is not the last and
// ends in zeros without its end record). The format is unchanged (version 4). A file that is not
// full size when it is opened (the first one of a fresh data directory, one made inline) gets a
// full-size successor prepared once it holds min(4 MiB, JournalFileBytes/8) bytes and is rotated
// as soon as that successor is ready.
//
// The next journal file is made ahead of rotation by a background goroutine (header fsynced,
// directory fsynced; nextjournal.go), so a rotation costs no flush in the sync loop. Such a file
// holds no record until it is used. Recovery therefore skips the journal files at the end of the
// sequence that hold no valid record, and replays the file before them as the last one (journal
// format version 3 says a data directory may hold such files). In SyncInterval mode a file made
// ahead carries the "previous file may end torn" flag; in SyncAlways mode it carries none and is
// not used after an abandoned file (that file is made inline with the flag, as before).
//
// Cursor log record body: type u8, then for type 1 (state) the cursor state below, for type 2
// (delete) the cursor name. Cursor state (integers as Go varints, zig-zag for signed):
//
//	version u8 (1) | name length uvarint, name | mark-delete ledger varint, entry varint |
//	range count uvarint, per range: ledger varint, first entry varint, (last-first) uvarint |
//	batch count uvarint, per batch: ledger varint, entry varint, batch size uvarint,
//	  word count uvarint, words u64 (bit i set = message i acknowledged) |
//	property count uvarint, per property: key length uvarint, key, value length uvarint, value
//
// Index body: entries u64, data bytes u64, segment file size u64, min publish time i64, max
// publish time i64, point count u32, then per point: entry id u64, file offset u64, max publish
// time of the entries from this point to the next i64. Points are taken every 64 entries or
// 64 KiB; Read seeks through them and FindByTime reads at most one block per segment.
//
// # Memory and files
//
// An idle open ledger costs well under 2 KiB (no goroutine, no open file, no buffer; segment
// and cursor files are created on first write). Open segment and cursor-log files are bounded by
// MaxOpenFiles through an LRU; the journal adds one. The entry cache is broker-wide, bounded by
// CacheBytes, FIFO by insertion (the tail is what caught-up readers want).
package storage
