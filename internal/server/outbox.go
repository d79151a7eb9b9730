package server

import (
	"net"
	"sync"
)

// outbox is a connection's outbound queue. Any goroutine appends encoded frames without blocking;
// the connection's writer goroutine takes everything queued at once and writes it with one writev
// (net.Buffers), so a burst of receipts or messages costs one system call.
//
// A frame may be several slices (a MESSAGE is its header plus the stored entry, which is shared with
// the entry cache and never copied); the slices of one frame are appended together under the lock, so
// frames never interleave.
type outbox struct {
	mu     sync.Mutex
	bufs   net.Buffers
	bytes  int
	closed bool
	// wake has capacity 1: a pending signal means "there is something to write".
	wake chan struct{}
	// drained is signalled (capacity 1) each time the writer empties the queue, for readers waiting
	// for the backlog to shrink.
	drained chan struct{}
}

func newOutbox() *outbox {
	return &outbox{wake: make(chan struct{}, 1), drained: make(chan struct{}, 1)}
}

// push queues one frame made of parts. It returns false if the outbox is closed (the connection is
// going away); the frame is dropped.
func (o *outbox) push(parts ...[]byte) bool {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return false
	}
	for _, p := range parts {
		if len(p) > 0 {
			o.bufs = append(o.bufs, p)
			o.bytes += len(p)
		}
	}
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
	return true
}

// queuedBytes is the number of bytes waiting to be written.
func (o *outbox) queuedBytes() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.bytes
}

// take removes and returns everything queued; spare is reused as the new queue's backing array.
func (o *outbox) take(spare net.Buffers) (net.Buffers, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	bufs, n := o.bufs, o.bytes
	clear(spare)
	o.bufs, o.bytes = spare[:0], 0
	return bufs, n
}

// close makes later pushes fail. Frames already queued stay for a final flush.
func (o *outbox) close() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

func (o *outbox) isClosed() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.closed
}

func (o *outbox) signalDrained() {
	select {
	case o.drained <- struct{}{}:
	default:
	}
}
