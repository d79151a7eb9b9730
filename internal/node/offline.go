package node

// Helpers for offline tools (meridian repair) that work on a stopped broker's data dir.

// StorageDir is where the storage engine keeps its files inside a data dir.
func StorageDir(dataDir string) string { return storageDir(dataDir) }

// LockDataDir takes the data dir's lock, as a running broker holds it: it fails with
// ErrDataDirLocked while a broker (or another tool) uses the data dir. The function returned
// releases it.
func LockDataDir(dataDir string) (release func() error, err error) {
	l, err := lockDataDir(dataDir)
	if err != nil {
		return nil, err
	}
	return l.release, nil
}
