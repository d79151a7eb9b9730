//go:build !linux

package server

import "net"

// tryWriteFunc is nil where writing without waiting is not built: receipts go through the writer.
func tryWriteFunc(net.Conn) func(net.Buffers) int { return nil }

// unreadFunc is nil where it is not built: SEND groups are published without a storage lead.
func unreadFunc(net.Conn) func() bool { return nil }
