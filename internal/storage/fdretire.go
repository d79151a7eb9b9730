package storage

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// Closing a written descriptor: wait for its writeback first.
//
// Linux reports a writeback error to the descriptors of the file, and to one opened later only
// while nobody has seen the error; but once no descriptor holds the file, its inode may be evicted
// from memory, and an error nobody reported goes with it. A checkpoint that opens the file again
// then fsyncs successfully although written data never reached the disk. So the file cache never
// just closes a descriptor written through since its last fsync: it hands it to a retire worker,
// which writes the file's dirty pages back and waits for them (vfs.WaitWriteback:
// sync_file_range, which reports a writeback error like fsync but flushes neither metadata nor
// the device's cache; the checkpoint's fsync still makes the data durable), reports a failure (the
// file becomes a repair target: repair.go), and closes it. The checkpoint waits for these before it
// decides (waitRetired). Files written once outside the cache (a ledger's NAME file) are closed the
// same way (retireFile).
//
// The cost is the data writes of each evicted written descriptor done earlier than the kernel
// would do them, waited for off the applier (on up to maxRetireWorkers goroutines); it arises only
// when more files are written between two checkpoints than the cache holds. An eighth of
// MaxOpenFiles (at least one) is set aside for descriptors waiting for that, the rest is the cache;
// a caller that needs a new descriptor while the allowance is used up waits for a retirement, so
// open descriptors stay within MaxOpenFiles.

// trackedFile is a cached read-write descriptor that counts its writes, so that the cache knows
// whether closing it needs a writeback wait first.
type trackedFile struct {
	vfs.File
	writes atomic.Uint64 // writes and truncations through this descriptor
	synced atomic.Uint64 // writes covered by an fsync or a writeback wait that returned (successfully or not)
}

var (
	_ vfs.DataSyncer       = (*trackedFile)(nil)
	_ vfs.WritebackWaiter  = (*trackedFile)(nil)
	_ vfs.WritebackStarter = (*trackedFile)(nil)
	_ vfs.CacheDropper     = (*trackedFile)(nil)
)

// A write is counted after it returned, and an fsync covers the writes counted before it started:
// a write racing with an fsync leaves the descriptor dirty.

func (t *trackedFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := t.File.WriteAt(p, off)
	t.writes.Add(1)
	return n, err
}

func (t *trackedFile) Truncate(size int64) error {
	err := t.File.Truncate(size)
	t.writes.Add(1)
	return err
}

// Sync and DataSync mark the writes before them as reported even when they fail: the caller has
// the error and handles it (a failed fsync is never retried; see checkpoint.go).
func (t *trackedFile) Sync() error {
	w := t.writes.Load()
	err := t.File.Sync()
	t.noteSynced(w)
	return err
}

func (t *trackedFile) DataSync() error {
	w := t.writes.Load()
	err := vfs.DataSync(t.File)
	t.noteSynced(w)
	return err
}

func (t *trackedFile) WaitWriteback() error {
	w := t.writes.Load()
	err := vfs.WaitWriteback(t.File)
	t.noteSynced(w)
	return err
}

func (t *trackedFile) noteSynced(w uint64) {
	for {
		s := t.synced.Load()
		if s >= w || t.synced.CompareAndSwap(s, w) {
			return
		}
	}
}

func (t *trackedFile) StartWriteback(off, n int64) error { return vfs.StartWriteback(t.File, off, n) }
func (t *trackedFile) DropCache(off, n int64) error      { return vfs.DropCache(t.File, off, n) }

func (t *trackedFile) dirty() bool { return t.writes.Load() != t.synced.Load() }

// maxRetireWorkers bounds the goroutines waiting for descriptors' writeback before closing them.
const maxRetireWorkers = 8

// retirer waits for descriptors' writeback and then closes them, on workers started on demand (each exits when
// the queue is empty; waitRetired waits for them). Guarded by the file cache's mutex.
type retirer struct {
	mu      *sync.Mutex
	cond    *sync.Cond // signalled when a retirement finishes
	queue   []*retiring
	pending map[*retiring]struct{} // queued or being written back
	workers int
	wg      sync.WaitGroup
	// onSyncError is told about a failed fsync (the engine makes the file a repair target).
	onSyncError func(path string, err error)
}

type retiring struct {
	path  string
	f     vfs.File
	close func()
	done  chan struct{}
}

func (r *retirer) init(mu *sync.Mutex) {
	r.mu = mu
	r.cond = sync.NewCond(mu)
	r.pending = map[*retiring]struct{}{}
}

// queueLocked hands f (of path) to a worker, which fsyncs it and then calls closeFn (mu held).
func (r *retirer) queueLocked(path string, f vfs.File, closeFn func()) {
	it := &retiring{path: path, f: f, close: closeFn, done: make(chan struct{})}
	r.queue = append(r.queue, it)
	r.pending[it] = struct{}{}
	if r.workers < maxRetireWorkers {
		r.workers++
		r.wg.Add(1)
		go r.work()
	}
}

func (r *retirer) work() {
	defer r.wg.Done()
	r.mu.Lock()
	for len(r.queue) > 0 {
		it := r.queue[0]
		r.queue[0] = nil
		r.queue = r.queue[1:]
		onErr := r.onSyncError
		r.mu.Unlock()
		if err := vfs.WaitWriteback(it.f); err != nil && onErr != nil {
			onErr(it.path, fmt.Errorf("storage: writeback before closing %s: %w", it.path, err))
		}
		it.close()
		r.mu.Lock()
		delete(r.pending, it)
		close(it.done)
		r.cond.Broadcast()
	}
	r.workers--
	r.mu.Unlock()
}

// create makes the file at path hold content only, through the cache: its descriptor's writeback
// is waited for before it is closed, so a writeback error of content is reported (a new segment's
// header).
func (c *fileCache) create(path string, content []byte) error {
	cf, err := c.acquire(path, true)
	if err != nil {
		return err
	}
	defer c.release(cf)
	if err := cf.f.Truncate(0); err != nil {
		return err
	}
	_, err = cf.f.WriteAt(content, 0)
	return err
}

// retireFile waits for the writeback of f (a file written once outside the cache, at path) in the
// background and then closes it.
func (c *fileCache) retireFile(path string, f vfs.File) {
	c.mu.Lock()
	c.retire.queueLocked(path, f, func() { _ = f.Close() })
	c.mu.Unlock()
}

// waitRetired waits until the descriptors handed over for closing before the call are written
// back and closed (their failures reported).
func (c *fileCache) waitRetired() {
	c.mu.Lock()
	done := make([]chan struct{}, 0, len(c.retire.pending))
	for it := range c.retire.pending {
		done = append(done, it.done)
	}
	c.mu.Unlock()
	for _, d := range done {
		<-d
	}
}

// stopRetiring waits for every retire worker to exit (the engine is closing: nothing is queued
// any more).
func (c *fileCache) stopRetiring() {
	c.waitRetired()
	c.retire.wg.Wait()
}
