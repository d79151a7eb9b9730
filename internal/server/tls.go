package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
)

// tlsHandshake completes the TLS handshake of a connection accepted on a TLS listener (a no-op for
// plaintext ones) within the keepalive interval, the same bound a client has to send CONNECT. A
// failure (a client certificate that does not verify, a plaintext client on the TLS port, a client
// that never finishes) closes the connection with one log line and counts in
// Stats.TLSHandshakeFailures.
func (c *conn) tlsHandshake() error {
	tc, ok := c.nc.(*tls.Conn)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.s.opts.KeepAliveInterval)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		// Only a server shutdown is not the client's failure. The connection itself may already be
		// stopping when the handshake fails: a keepalive PING written before it finishes runs the
		// handshake from the writer, whose failure aborts the connection first.
		if c.s.isClosed() {
			return c.stopReason()
		}
		c.s.stats.tlsHandshakeFailures.Add(1)
		c.log.Info("closing connection: TLS handshake failed", "err", err)
		return fmt.Errorf("TLS handshake: %w", err)
	}
	return nil
}

// coalescerChunk is the most one Write hands crypto/tls: four full TLS records.
const coalescerChunk = 64 << 10

// coalescer writes a burst of frames to a TLS connection as few, full records. crypto/tls turns
// every Write into its own records and system calls, so writing the outbox's buffers one by one
// (as net.Buffers does for a non-socket) would cost a record and a system call per receipt or
// message; the burst is copied into one reused buffer instead (the encryption copies it anyway).
type coalescer struct{ buf []byte }

func (co *coalescer) write(w io.Writer, bufs net.Buffers) error {
	if co.buf == nil {
		co.buf = make([]byte, 0, coalescerChunk)
	}
	co.buf = co.buf[:0]
	for _, b := range bufs {
		for len(b) > 0 {
			n := min(len(b), coalescerChunk-len(co.buf))
			co.buf = append(co.buf, b[:n]...)
			b = b[n:]
			if len(co.buf) == coalescerChunk {
				if _, err := w.Write(co.buf); err != nil {
					return err
				}
				co.buf = co.buf[:0]
			}
		}
	}
	if len(co.buf) > 0 {
		if _, err := w.Write(co.buf); err != nil {
			return err
		}
	}
	return nil
}
