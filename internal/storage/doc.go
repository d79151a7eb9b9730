// Package storage is Meridian's storage engine: durable, append-only topic ledgers with group
// commit, cursors, trimming/retention, a broker-wide entry cache and crash recovery.
//
// The on-disk format (version 1) is documented in docs/storage.md and summarised here once final.
package storage
