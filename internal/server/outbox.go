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
	// tail is the block small frames are appended to (appendFrame): while it is bufs' last
	// element (tailAt), the next small frame extends it instead of adding a slice. Bytes already
	// in bufs or handed to the writer (take) are never written again: later frames go after them.
	tail   []byte
	tailAt int // index of tail in bufs, -1 if bufs does not end with it
	// wake has capacity 1: a pending signal means "there is something to write".
	wake chan struct{}
	// drained is signalled (capacity 1) each time the writer empties the queue, for readers waiting
	// for the backlog to shrink.
	drained chan struct{}
}

func newOutbox() *outbox {
	return &outbox{wake: make(chan struct{}, 1), drained: make(chan struct{}, 1), tailAt: -1}
}

// smallBlock is the size of the blocks small frames are copied into.
const smallBlock = 4 << 10

// appendFrame queues a small frame (at most smallFrameMax bytes, e.g. a SEND_RECEIPT) that enc
// appends to its argument: consecutive small frames share one block, so a burst of receipts is one
// slice for the writer and one allocation per block rather than per frame. enc must only append.
// It returns false if the outbox is closed.
func (o *outbox) appendFrame(enc func([]byte) []byte) bool {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return false
	}
	if o.tailAt != len(o.bufs)-1 || o.tailAt < 0 || cap(o.tail)-len(o.tail) < smallFrameMax {
		if cap(o.tail)-len(o.tail) < smallFrameMax {
			o.tail = make([]byte, 0, smallBlock)
		} else {
			o.tail = o.tail[len(o.tail):] // the rest of the block, after what was handed out
		}
		o.bufs = append(o.bufs, nil)
		o.tailAt = len(o.bufs) - 1
	}
	n := len(o.tail)
	o.tail = enc(o.tail)
	o.bytes += len(o.tail) - n
	o.bufs[o.tailAt] = o.tail
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
	return true
}

// smallFrameMax bounds what appendFrame may append (a SEND_RECEIPT takes at most ~70 bytes).
const smallFrameMax = 128

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
	if o.tailAt >= 0 {
		o.tailAt = -1
		o.tail = o.tail[len(o.tail):] // the writer has the bytes so far; later frames go after them
	}
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
