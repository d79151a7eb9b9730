// Package localstore is the default metadata.Store: every key in memory, every change written to a
// bbolt file (fsync per change) before it becomes visible. Watches and sessions are in-process;
// sessions end when they or the store are closed, and ephemeral keys left by a crash are deleted
// (as new, watchable revisions) when the file is opened again. Revisions and the recent change
// history are persisted, so a watch from a revision works across restarts as long as that revision
// is still in the retained history.
//
// # File format, version 1
//
// One bbolt file (usually <data-dir>/metadata.db) with three top-level buckets. All integers are
// big-endian.
//
//	bucket "meta"
//	  "format"   uint32  file format version, 1
//	  "revision" uint64  current store revision (>= 1)
//	  "compact"  uint64  revisions <= this are no longer in the "log" bucket
//	bucket "kv"      key: the metadata key's bytes; value: a KV record
//	  [0]     flags   bit 0: ephemeral (belongs to a session; deleted at open), other bits 0
//	  [1:9]   uint64  version
//	  [9:17]  uint64  mod revision
//	  [17:]   value bytes
//	bucket "log"     key: uint64 revision (8 bytes); value: a change record
//	  [0]     type    1 put, 2 delete
//	  [1:5]   uint32  key length n
//	  [5:5+n] key bytes
//	  put only:
//	  [5+n:13+n] uint64 version
//	  [13+n:]    value bytes
//
// The log keeps the most recent changes (bounded by count and bytes, the same bounds as the in-memory
// history); older entries are deleted in the same transaction that advances "compact". A file with an
// unknown format version or a malformed record is refused at open with an error naming the record.
package localstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/meridian-mq/meridian/internal/metadata"
	"github.com/meridian-mq/meridian/internal/metadata/internal/engine"
)

// FormatVersion is the file format version this package writes and reads.
const FormatVersion = 1

var (
	bucketMeta = []byte("meta")
	bucketKV   = []byte("kv")
	bucketLog  = []byte("log")

	keyFormat   = []byte("format")
	keyRevision = []byte("revision")
	keyCompact  = []byte("compact")
)

const (
	logPut    = 1
	logDelete = 2

	flagEphemeral = 1
)

// Options tune the store. The zero value is fine.
type Options struct {
	// MaxHistoryEvents bounds the retained change history (default 10000).
	MaxHistoryEvents int
	// LockTimeout bounds the wait for the file lock held by another process or store (default 2s).
	LockTimeout time.Duration
}

// Store is a metadata.Store backed by a bbolt file.
type Store struct {
	*engine.Engine
	db   *bolt.DB
	path string
}

var _ metadata.Store = (*Store)(nil)

// OpenDir opens (creating if needed) the store file metadata.LocalFileName in dataDir. A dataDir it
// creates is not made durable in its parent: the broker creates its data dir durably first
// (internal/node, lockDataDir).
func OpenDir(dataDir string, opt Options) (*Store, error) {
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, fmt.Errorf("local metadata store: %w", err)
	}
	return Open(filepath.Join(dataDir, metadata.LocalFileName), opt)
}

// Open opens (creating if needed) the store file at path. The file is locked: a second Open of the
// same file, in this or another process, fails after opt.LockTimeout.
func Open(path string, opt Options) (*Store, error) {
	if opt.LockTimeout <= 0 {
		opt.LockTimeout = 2 * time.Second
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: opt.LockTimeout})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("local metadata store %s is locked by another process or store (open it once and share it): %w", path, err)
		}
		return nil, fmt.Errorf("local metadata store %s: %w", path, err)
	}
	// bbolt fsyncs a new file's first pages, not the file's entry in its directory: without this
	// a power loss soon after the first start could take the file, and every change acknowledged
	// in it, with the entry. Every open syncs it, since an earlier one may have created the file
	// and died before its sync (a sync of an unchanged directory writes nothing).
	if err := syncDir(filepath.Dir(path)); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("local metadata store %s: sync its directory: %w", path, err)
	}
	st, err := load(db)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("local metadata store %s: %w", path, err)
	}
	e, err := engine.New(st, &persister{db: db}, engine.Options{MaxHistoryEvents: opt.MaxHistoryEvents, Name: "localstore " + path})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("local metadata store %s: %w", path, err)
	}
	return &Store{Engine: e, db: db, path: path}, nil
}

// Path returns the store file's path.
func (s *Store) Path() string { return s.path }

// Close ends sessions (deleting their ephemeral keys), stops watches and closes the file.
func (s *Store) Close() error {
	err := s.Engine.Close()
	if cerr := s.db.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("closing %s: %w", s.path, cerr)
	}
	return err
}

// Health reports a closed store or an unusable file.
func (s *Store) Health(ctx context.Context) error {
	if err := s.Engine.Health(ctx); err != nil {
		return err
	}
	err := s.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketMeta) == nil {
			return fmt.Errorf("meta bucket missing: %w", metadata.ErrUnavailable)
		}
		return nil
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, bolterrors.ErrDatabaseNotOpen):
		return fmt.Errorf("local metadata store %s: %w", s.path, metadata.ErrClosed)
	case errors.Is(err, metadata.ErrUnavailable):
		return fmt.Errorf("local metadata store %s: %w", s.path, err)
	default:
		return fmt.Errorf("local metadata store %s: %w", s.path, errors.Join(metadata.ErrUnavailable, err))
	}
}

func u64(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

func load(db *bolt.DB) (engine.State, error) {
	var st engine.State
	err := db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			var err error
			if meta, err = tx.CreateBucket(bucketMeta); err != nil {
				return err
			}
			if err := meta.Put(keyFormat, binary.BigEndian.AppendUint32(nil, FormatVersion)); err != nil {
				return err
			}
			if err := meta.Put(keyRevision, u64(1)); err != nil {
				return err
			}
			if err := meta.Put(keyCompact, u64(1)); err != nil {
				return err
			}
		}
		if f := meta.Get(keyFormat); len(f) != 4 || binary.BigEndian.Uint32(f) != FormatVersion {
			return fmt.Errorf("unsupported file format %x (this build reads version %d)", f, FormatVersion)
		}
		rev, err := readU64(meta, keyRevision)
		if err != nil {
			return err
		}
		compact, err := readU64(meta, keyCompact)
		if err != nil {
			return err
		}
		if rev < 1 || compact > rev {
			return fmt.Errorf("meta record: revision %d, compact %d are inconsistent", rev, compact)
		}
		st.Revision, st.CompactRev = rev, compact
		kvb, err := tx.CreateBucketIfNotExists(bucketKV)
		if err != nil {
			return err
		}
		if err := kvb.ForEach(func(k, v []byte) error {
			kv, eph, err := decodeKV(k, v)
			if err != nil {
				return err
			}
			if kv.ModRevision > rev {
				return fmt.Errorf("key %q: mod revision %d is after the store revision %d", k, kv.ModRevision, rev)
			}
			st.Entries = append(st.Entries, engine.Entry{KV: kv, Ephemeral: eph})
			return nil
		}); err != nil {
			return err
		}
		logb, err := tx.CreateBucketIfNotExists(bucketLog)
		if err != nil {
			return err
		}
		prev := compact
		return logb.ForEach(func(k, v []byte) error {
			ev, err := decodeLog(k, v)
			if err != nil {
				return err
			}
			if ev.Revision <= compact {
				return nil // trimmed lazily
			}
			if ev.Revision != prev+1 || ev.Revision > rev {
				return fmt.Errorf("change log: revision %d follows %d (store revision %d)", ev.Revision, prev, rev)
			}
			prev = ev.Revision
			st.History = append(st.History, ev)
			return nil
		})
	})
	if err == nil && len(st.History) > 0 && st.History[len(st.History)-1].Revision != st.Revision {
		err = fmt.Errorf("change log ends at revision %d, store revision is %d", st.History[len(st.History)-1].Revision, st.Revision)
	}
	return st, err
}

func readU64(b *bolt.Bucket, key []byte) (int64, error) {
	v := b.Get(key)
	if len(v) != 8 {
		return 0, fmt.Errorf("meta record %q: %d bytes, want 8", key, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

func encodeKV(kv metadata.KV, ephemeral bool) []byte {
	b := make([]byte, 17, 17+len(kv.Value))
	if ephemeral {
		b[0] = flagEphemeral
	}
	binary.BigEndian.PutUint64(b[1:9], uint64(kv.Version))
	binary.BigEndian.PutUint64(b[9:17], uint64(kv.ModRevision))
	return append(b, kv.Value...)
}

func decodeKV(k, v []byte) (metadata.KV, bool, error) {
	if len(v) < 17 {
		return metadata.KV{}, false, fmt.Errorf("key %q: record of %d bytes, want at least 17", k, len(v))
	}
	if v[0]&^flagEphemeral != 0 {
		return metadata.KV{}, false, fmt.Errorf("key %q: unknown flags %#x", k, v[0])
	}
	kv := metadata.KV{
		Key:         string(k),
		Version:     int64(binary.BigEndian.Uint64(v[1:9])),
		ModRevision: int64(binary.BigEndian.Uint64(v[9:17])),
		Value:       append([]byte{}, v[17:]...),
	}
	if kv.Version < 1 || kv.ModRevision < 1 {
		return metadata.KV{}, false, fmt.Errorf("key %q: version %d, mod revision %d must be positive", k, kv.Version, kv.ModRevision)
	}
	if err := metadata.ValidateKey(kv.Key); err != nil {
		return metadata.KV{}, false, err
	}
	return kv, v[0]&flagEphemeral != 0, nil
}

func encodeLog(c engine.Change) []byte {
	b := make([]byte, 0, 13+len(c.KV.Key)+len(c.KV.Value))
	if c.Type == metadata.EventPut {
		b = append(b, logPut)
	} else {
		b = append(b, logDelete)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(c.KV.Key)))
	b = append(b, c.KV.Key...)
	if c.Type == metadata.EventPut {
		b = binary.BigEndian.AppendUint64(b, uint64(c.KV.Version))
		b = append(b, c.KV.Value...)
	}
	return b
}

func decodeLog(k, v []byte) (metadata.Event, error) {
	if len(k) != 8 {
		return metadata.Event{}, fmt.Errorf("change log: key of %d bytes, want 8", len(k))
	}
	rev := int64(binary.BigEndian.Uint64(k))
	if len(v) < 5 {
		return metadata.Event{}, fmt.Errorf("change log revision %d: record of %d bytes", rev, len(v))
	}
	n := binary.BigEndian.Uint32(v[1:5])
	if uint64(n) > uint64(len(v)-5) {
		return metadata.Event{}, fmt.Errorf("change log revision %d: key length %d overruns the %d-byte record", rev, n, len(v))
	}
	key := string(v[5 : 5+n])
	rest := v[5+n:]
	ev := metadata.Event{Revision: rev, KV: metadata.KV{Key: key, ModRevision: rev}}
	switch v[0] {
	case logPut:
		if len(rest) < 8 {
			return metadata.Event{}, fmt.Errorf("change log revision %d: put record without a version", rev)
		}
		ev.Type = metadata.EventPut
		ev.KV.Version = int64(binary.BigEndian.Uint64(rest[:8]))
		ev.KV.Value = append([]byte{}, rest[8:]...)
	case logDelete:
		if len(rest) != 0 {
			return metadata.Event{}, fmt.Errorf("change log revision %d: %d trailing bytes after a delete", rev, len(rest))
		}
		ev.Type = metadata.EventDelete
	default:
		return metadata.Event{}, fmt.Errorf("change log revision %d: unknown change type %d", rev, v[0])
	}
	return ev, nil
}

type persister struct{ db *bolt.DB }

func (p *persister) Commit(c engine.Change) error {
	return p.db.Update(func(tx *bolt.Tx) error {
		meta, kvb, logb := tx.Bucket(bucketMeta), tx.Bucket(bucketKV), tx.Bucket(bucketLog)
		rev := c.KV.ModRevision
		switch c.Type {
		case metadata.EventPut:
			if err := kvb.Put([]byte(c.KV.Key), encodeKV(c.KV, c.Ephemeral)); err != nil {
				return err
			}
		case metadata.EventDelete:
			if err := kvb.Delete([]byte(c.KV.Key)); err != nil {
				return err
			}
		}
		if err := logb.Put(u64(rev), encodeLog(c)); err != nil {
			return err
		}
		if err := meta.Put(keyRevision, u64(rev)); err != nil {
			return err
		}
		// Trim the log to what the in-memory history keeps (the new change itself may push one more
		// entry out; that is trimmed with the next change).
		if c.CompactRev > 0 {
			var old [][]byte
			cur := logb.Cursor()
			for k, _ := cur.First(); k != nil && int64(binary.BigEndian.Uint64(k)) <= c.CompactRev; k, _ = cur.Next() {
				old = append(old, k)
			}
			for _, k := range old {
				if err := logb.Delete(k); err != nil {
					return err
				}
			}
			if err := meta.Put(keyCompact, u64(c.CompactRev)); err != nil {
				return err
			}
		}
		return nil
	})
}

// syncDir makes a directory's entries durable (a variable for the test that checks it is called).
var syncDir = syncDirOS

func syncDirOS(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
