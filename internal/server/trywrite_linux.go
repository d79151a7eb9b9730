package server

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// tryWriteFunc returns a function that writes to nc what its socket takes at once, without
// waiting, and returns how many bytes that was (0 on any error: the writer meets it itself). Nil
// for a connection without a socket of its own (TLS: its records are the writer's alone).
func tryWriteFunc(nc net.Conn) func(net.Buffers) int {
	rc := rawConnOf(nc)
	if rc == nil {
		return nil
	}
	return func(bufs net.Buffers) int {
		if len(bufs) > maxIOV {
			bufs = bufs[:maxIOV]
		}
		n := 0
		_ = rc.Write(func(fd uintptr) bool {
			if w, err := unix.Writev(int(fd), bufs); err == nil {
				n = w
			}
			return true // never wait for the socket: the writer does
		})
		return n
	}
}

// maxIOV bounds the slices of one tryWrite (Linux takes at most 1,024 per writev).
const maxIOV = 1024

// unreadFunc returns a function that reports whether nc's socket holds bytes not yet read, or
// nil for a connection without a socket of its own (TLS).
func unreadFunc(nc net.Conn) func() bool {
	rc := rawConnOf(nc)
	if rc == nil {
		return nil
	}
	return func() bool {
		unread := false
		_ = rc.Control(func(fd uintptr) {
			n, err := unix.IoctlGetInt(int(fd), unix.SIOCINQ)
			unread = err == nil && n > 0
		})
		return unread
	}
}

// rawConnOf returns nc's socket, or nil for a connection without one of its own (TLS).
func rawConnOf(nc net.Conn) syscall.RawConn {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}
