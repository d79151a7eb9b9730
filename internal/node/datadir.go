package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/meridian-mq/meridian/internal/storage/vfs"
)

// The data dir layout owned by the node (the storage engine and the local metadata store keep their
// own files beside these):
//
//	<data-dir>/LOCK           empty; held with flock(2) while a broker runs, so two processes never
//	                          share a data dir (the kernel drops the lock when the process dies, so a
//	                          restart after SIGKILL is not blocked)
//	<data-dir>/cluster.json   {"format":1,"cluster":"<name>","createdAt":"<RFC 3339>"}: binds the data
//	                          dir to its cluster; written once (temp file + fsync + rename + dir fsync)
const (
	lockFileName    = "LOCK"
	clusterFileName = "cluster.json"
	// clusterFileFormat is the version of cluster.json.
	clusterFileFormat = 1
)

// clusterFile is the content of cluster.json.
type clusterFile struct {
	Format    int       `json:"format"`
	Cluster   string    `json:"cluster"`
	CreatedAt time.Time `json:"createdAt"`
}

// ErrForeignDataDir is returned when the data dir belongs to another cluster.
var ErrForeignDataDir = errors.New("data dir belongs to another cluster")

// ErrDataDirLocked is returned when another process uses the data dir.
var ErrDataDirLocked = errors.New("data dir is in use by another process")

// dataDirLock holds the flock on <data-dir>/LOCK.
type dataDirLock struct{ f *os.File }

// lockDataDir creates the data dir if needed and takes its lock. The directories it creates have
// their entries fsynced, so that a power loss cannot take a new data dir, and what is acknowledged
// in it later, with them (storage fsyncs the data dir itself when it creates storage/ in it).
func lockDataDir(dir string) (*dataDirLock, error) {
	if err := vfs.MkdirAllDurable(vfs.OS{}, dir); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, lockFileName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open data dir lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", dir, ErrDataDirLocked)
		}
		return nil, fmt.Errorf("lock data dir %s: %w", dir, err)
	}
	return &dataDirLock{f: f}, nil
}

func (l *dataDirLock) release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the descriptor drops the flock
	l.f = nil
	return err
}

// bindDataDir checks that dir belongs to cluster, or binds a fresh dir to it. A dir that already
// holds data but no cluster.json (written by nothing we know) is bound too: the first release wrote
// no other layout.
func bindDataDir(dir, cluster string) error {
	path := filepath.Join(dir, clusterFileName)
	raw, err := os.ReadFile(path)
	switch {
	case err == nil:
		var cf clusterFile
		if err := json.Unmarshal(raw, &cf); err != nil {
			return fmt.Errorf("%s is unreadable (%v): fix or remove it by hand", path, err)
		}
		if cf.Format != clusterFileFormat {
			return fmt.Errorf("%s has format %d, this build understands %d", path, cf.Format, clusterFileFormat)
		}
		if cf.Cluster != cluster {
			return fmt.Errorf("%s holds cluster %q, not %q: %w", dir, cf.Cluster, cluster, ErrForeignDataDir)
		}
		return nil
	case errors.Is(err, fs.ErrNotExist):
	default:
		return fmt.Errorf("read %s: %w", path, err)
	}
	raw, err = json.Marshal(clusterFile{Format: clusterFileFormat, Cluster: cluster, CreatedAt: time.Now().UTC()})
	if err != nil {
		return err
	}
	return writeFileDurably(path, append(raw, '\n'))
}

// writeFileDurably writes path atomically: temp file, fsync, rename, fsync of the directory.
func writeFileDurably(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("sync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s: %w", path, err)
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("open dir of %s: %w", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir of %s: %w", path, err)
	}
	return nil
}

// freshPaths are the parts of a data dir that did not exist before a start.
type freshPaths struct {
	dir         string // the data dir itself, or ""
	lockFile    string
	clusterFile string
}

// missingDataDirPaths notes which of the data dir, its LOCK and its cluster.json do not exist yet.
func missingDataDirPaths(dir string) freshPaths {
	var f freshPaths
	missing := func(p string) bool {
		_, err := os.Lstat(p)
		return errors.Is(err, fs.ErrNotExist)
	}
	if missing(dir) {
		f.dir = dir
	}
	if p := filepath.Join(dir, lockFileName); missing(p) {
		f.lockFile = p
	}
	if p := filepath.Join(dir, clusterFileName); missing(p) {
		f.clusterFile = p
	}
	return f
}

// removeFiles removes the cluster.json and LOCK a failed start created (called with the lock held,
// so no other process can have written them meanwhile).
func (f freshPaths) removeFiles() error {
	var errs []error
	for _, p := range []string{f.clusterFile, f.lockFile} {
		if p == "" {
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove %s after a failed start: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// removeDir removes the data dir a failed start created, if nothing else is in it (a start that
// got as far as storage leaves its files, and so the dir, in place).
func (f freshPaths) removeDir() {
	if f.dir != "" {
		_ = os.Remove(f.dir)
	}
}

// DataDirCluster returns the cluster a data dir is bound to (its cluster.json), or ok false when
// the dir is not bound (missing, or without cluster.json).
func DataDirCluster(dir string) (cluster string, ok bool, err error) {
	path := filepath.Join(dir, clusterFileName)
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read %s: %w", path, err)
	}
	var cf clusterFile
	if err := json.Unmarshal(raw, &cf); err != nil {
		return "", false, fmt.Errorf("%s is unreadable (%v): fix or remove it by hand", path, err)
	}
	return cf.Cluster, true, nil
}
