// Package memstore is an in-memory metadata.Store for tests and for single-process setups that need
// no durability. It has the same revisions, CAS, watch and session semantics as the other stores
// (checked by internal/metadata/storetest); nothing survives Close.
package memstore

import (
	"github.com/meridian-mq/meridian/internal/metadata"
	"github.com/meridian-mq/meridian/internal/metadata/internal/engine"
)

// Options tune the store. The zero value is fine.
type Options struct {
	// MaxHistoryEvents bounds how many recent changes are kept for watches that start in the past or
	// fall behind (default 10000); older starting points get metadata.ErrCompacted.
	MaxHistoryEvents int
}

// Store is an in-memory metadata.Store.
type Store struct {
	*engine.Engine
}

var _ metadata.Store = (*Store)(nil)

// New returns an empty store at revision 1.
func New() *Store { return NewWithOptions(Options{}) }

// NewWithOptions returns an empty store at revision 1.
func NewWithOptions(opt Options) *Store {
	e, err := engine.New(engine.State{Revision: 1}, nil, engine.Options{MaxHistoryEvents: opt.MaxHistoryEvents, Name: "memstore"})
	if err != nil {
		panic("memstore: an empty state cannot fail: " + err.Error())
	}
	return &Store{Engine: e}
}
