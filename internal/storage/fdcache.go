package storage

import (
	"container/list"
	"sync"

	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// fileCache bounds the number of open segment and cursor-log files across all ledgers: files
// are opened on demand and the least recently used idle ones are closed. A descriptor written
// through since its last fsync has its writeback waited for before it is closed (fdretire.go).
type fileCache struct {
	fs    vfs.FS
	limit int // idle descriptors are closed beyond this many (MaxOpenFiles less retireAllowance)
	// retireAllowance: descriptors that may be waiting for their writeback before they are closed
	// (fdretire.go); with the cached ones they stay within MaxOpenFiles.
	retireAllowance int

	mu    sync.Mutex
	files map[string]*cachedFile
	lru   *list.List // of *cachedFile with refs == 0, front = most recent
	// Descriptors being written back before they are closed (fdretire.go), under mu.
	retire retirer
}

type cachedFile struct {
	path string
	f    vfs.File
	// df: the same file opened for direct writes (vfs.OpenDirect), by the applier on its first
	// write that bypasses the page cache (unbuffered.go); closed with f.
	df vfs.File
	// dr: the same file opened for direct reads, by the first reader that bypasses the page
	// cache (directReader); drErr the failure to open it. Under dmu.
	dmu   sync.Mutex
	dr    vfs.File
	drErr error
	refs  int
	elem  *list.Element
	err   error
	// ready is closed once the open attempt finished.
	ready chan struct{}
}

func newFileCache(fsys vfs.FS, maxOpen int) *fileCache {
	allowance := max(1, maxOpen/8)
	c := &fileCache{fs: fsys, limit: max(1, maxOpen-allowance), retireAllowance: allowance, files: map[string]*cachedFile{}, lru: list.New()}
	c.retire.init(&c.mu)
	return c
}

// acquire returns an open handle for path (opened read-write); release it with release.
// create says whether a missing file may be created (empty).
func (c *fileCache) acquire(path string, create bool) (*cachedFile, error) {
	c.mu.Lock()
	if cf, ok := c.files[path]; ok {
		cf.refs++
		if cf.elem != nil {
			c.lru.Remove(cf.elem)
			cf.elem = nil
		}
		c.mu.Unlock()
		<-cf.ready
		if cf.err != nil {
			c.release(cf)
			return nil, cf.err
		}
		return cf, nil
	}
	// As many closed descriptors as allowed are still being written back: wait for one (they hold
	// files open).
	for len(c.retire.pending) >= c.retireAllowance {
		c.retire.cond.Wait()
	}
	if _, ok := c.files[path]; ok { // opened by another goroutine meanwhile
		c.mu.Unlock()
		return c.acquire(path, create)
	}
	cf := &cachedFile{path: path, refs: 1, ready: make(chan struct{})}
	c.files[path] = cf
	c.evictLocked()
	c.mu.Unlock()

	flag := vfs.ReadWrite
	if create {
		flag |= vfs.Create
	}
	var f vfs.File
	f, cf.err = c.fs.OpenFile(path, flag)
	if cf.err == nil {
		cf.f = &trackedFile{File: f}
	}
	close(cf.ready)
	if cf.err != nil {
		err := cf.err
		c.mu.Lock()
		cf.refs--
		if c.files[path] == cf && cf.refs == 0 {
			delete(c.files, path)
		}
		c.mu.Unlock()
		return nil, err
	}
	return cf, nil
}

func (c *fileCache) release(cf *cachedFile) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cf.refs--
	if cf.refs > 0 {
		return
	}
	if cf.err != nil || cf.f == nil {
		if c.files[cf.path] == cf {
			delete(c.files, cf.path)
		}
		return
	}
	if c.files[cf.path] != cf {
		cf.close()
		return
	}
	cf.elem = c.lru.PushFront(cf)
	c.evictLocked()
}

func (c *fileCache) evictLocked() {
	for len(c.files) > c.limit && c.lru.Len() > 0 {
		cf := c.lru.Remove(c.lru.Back()).(*cachedFile)
		cf.elem = nil
		delete(c.files, cf.path)
		if t, ok := cf.f.(*trackedFile); ok && t.dirty() {
			c.retire.queueLocked(cf.path, t, cf.close) // written back, then closed
			continue
		}
		cf.close()
	}
}

// forget closes path if idle and makes later acquires reopen it (after delete or rename).
func (c *fileCache) forget(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cf, ok := c.files[path]
	if !ok {
		return
	}
	delete(c.files, path)
	if cf.elem != nil {
		c.lru.Remove(cf.elem)
		cf.elem = nil
		cf.close()
	}
}

// forgetPrefix forgets every file under dir.
func (c *fileCache) forgetPrefix(dir string) {
	c.mu.Lock()
	var paths []string
	for p := range c.files {
		if len(p) > len(dir) && p[:len(dir)] == dir && p[len(dir)] == '/' {
			paths = append(paths, p)
		}
	}
	c.mu.Unlock()
	for _, p := range paths {
		c.forget(p)
	}
}

// open is the number of descriptors the cache holds, counting those being written back before they
// are closed.
func (c *fileCache) open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.files) + len(c.retire.pending)
}

// closeAll closes every idle descriptor, after the writebacks of those being closed finished.
func (c *fileCache) closeAll() {
	c.stopRetiring()
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, cf := range c.files {
		if cf.elem != nil {
			c.lru.Remove(cf.elem)
			cf.close()
		}
		delete(c.files, p)
	}
}

// close closes the file's handles.
func (cf *cachedFile) close() {
	_ = cf.f.Close()
	if cf.df != nil {
		_ = cf.df.Close()
	}
	if cf.dr != nil {
		_ = cf.dr.Close()
	}
}

// directReader returns the file opened for direct reads (unbuffered.go), opening it on first use;
// a failure to open it is remembered.
func (cf *cachedFile) directReader(fsys vfs.FS) (vfs.File, error) {
	cf.dmu.Lock()
	defer cf.dmu.Unlock()
	if cf.dr == nil && cf.drErr == nil {
		cf.dr, cf.drErr = vfs.OpenDirect(fsys, cf.path)
	}
	return cf.dr, cf.drErr
}
