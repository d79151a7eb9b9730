package server

import (
	"net"
	"sync"
	"time"
)

// outbox is a connection's outbound queue. Any goroutine appends encoded frames without blocking;
// the connection's writer goroutine takes everything queued at once and writes it with one writev
// (net.Buffers), so a burst of receipts or messages costs one system call.
//
// A frame may be several slices (a MESSAGE is its header plus the stored entry, which is shared with
// the entry cache and never copied); the slices of one frame are appended together under the lock, so
// frames never interleave.
//
// A receipt that comes alone, long after the previous one (a light load), is written at once by the
// goroutine that completes it instead (appendFrameNow): waking the writer would wake a parked thread
// for one small write, which under a light load costs more CPU than the write.
type outbox struct {
	mu     sync.Mutex
	bufs   net.Buffers
	bytes  int
	closed bool
	// tail is the block small frames are appended to (appendFrameNow): while it is bufs' last
	// element (tailAt), the next small frame extends it instead of adding a slice. Bytes already
	// in bufs or handed to the writer (take) are never written again: later frames go after them.
	tail   []byte
	tailAt int // index of tail in bufs, -1 if bufs does not end with it
	// wake has capacity 1: a pending signal means "there is something to write".
	wake chan struct{}
	// drained is signalled (capacity 1) each time the writer empties the queue, for readers waiting
	// for the backlog to shrink.
	drained chan struct{}
	// writing: a goroutine holds bytes it took and has not finished writing them (the writer
	// between take and wrote, or appendFrameNow); the other leaves the queue alone meanwhile, so
	// frames leave in the order they were queued.
	writing bool
	// lastSmall is when the last small frame was queued (appendFrameNow), nowSpare the backing
	// array appendFrameNow takes the queue into.
	lastSmall time.Time
	nowSpare  net.Buffers
}

func newOutbox() *outbox {
	return &outbox{wake: make(chan struct{}, 1), drained: make(chan struct{}, 1), tailAt: -1}
}

// smallBlock is the size of the blocks small frames are copied into.
const smallBlock = 4 << 10

// sparseGap is how long after the previous small frame one counts as alone (appendFrameNow):
// receipts of a light load come about a millisecond apart (one per group commit), those of a heavy
// one microseconds apart.
const sparseGap = 200 * time.Microsecond

// appendFrameNow queues a small frame (at most smallFrameMax bytes, e.g. a SEND_RECEIPT) that enc
// appends to its argument: consecutive small frames share one block, so a burst of receipts is one
// slice for the writer and one allocation per block rather than per frame. enc must only append.
// It returns false if the outbox is closed.
//
// When the frame is alone (nothing else queued or being written, and the previous small frame came
// sparseGap or more ago), it is written at once on the caller's goroutine with tryWrite instead of
// waking the writer. tryWrite must not
// block: it writes what the socket takes now and returns how many bytes that was; the rest, and
// every error, is left to the writer. With tryWrite nil the writer writes it.
func (o *outbox) appendFrameNow(enc func([]byte) []byte, tryWrite func(net.Buffers) int) bool {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return false
	}
	now := time.Now()
	alone := tryWrite != nil && o.bytes == 0 && !o.writing && now.Sub(o.lastSmall) >= sparseGap
	o.lastSmall = now
	o.appendFrameLocked(enc)
	if !alone {
		o.mu.Unlock()
		o.signal()
		return true
	}
	bufs, n := o.takeLocked(o.nowSpare)
	o.writing = true
	o.mu.Unlock()
	written := tryWrite(bufs)
	o.mu.Lock()
	o.writing = false
	if written < n {
		o.putBackLocked(bufs, written)
	}
	clear(bufs)
	o.nowSpare = bufs[:0]
	left := o.bytes > 0 || o.closed // a closing writer waits for this write to end
	o.mu.Unlock()
	if left {
		o.signal()
	}
	return true
}

// putBackLocked puts what is left of bufs after its first written bytes back at the front of the
// queue (o.mu held).
func (o *outbox) putBackLocked(bufs net.Buffers, written int) {
	var rest net.Buffers
	left := 0
	for _, b := range bufs {
		if written >= len(b) {
			written -= len(b)
			continue
		}
		rest = append(rest, b[written:])
		left += len(b) - written
		written = 0
	}
	o.bufs = append(rest, o.bufs...)
	o.bytes += left
	if o.tailAt >= 0 {
		o.tailAt += len(rest)
	}
}

func (o *outbox) signal() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// appendFrameLocked appends a small frame to the tail block (o.mu held).
func (o *outbox) appendFrameLocked(enc func([]byte) []byte) {
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
}

// smallFrameMax bounds what appendFrameNow and pushHeaded may append (a SEND_RECEIPT takes at most
// ~70 bytes, a MESSAGE head about 60 plus 11 per ack-set word).
const smallFrameMax = 128

// pushHeaded queues a frame made of a small head (at most smallFrameMax bytes), copied into the
// small-frame block as appendFrameNow's frames are, and a payload queued as it is (a stored entry
// shared with the entry cache): a delivered entry's MESSAGE head costs no allocation of its own.
// It returns false if the outbox is closed; the frame is dropped.
func (o *outbox) pushHeaded(head, payload []byte) bool {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return false
	}
	o.appendFrameLocked(func(dst []byte) []byte { return append(dst, head...) })
	if len(payload) > 0 {
		o.bufs = append(o.bufs, payload)
		o.bytes += len(payload)
	}
	o.mu.Unlock()
	o.signal()
	return true
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

// take removes and returns everything queued for the writer, which calls wrote once it has written
// it; spare is reused as the new queue's backing array. It takes nothing while appendFrameNow
// writes.
func (o *outbox) take(spare net.Buffers) (net.Buffers, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.writing {
		return spare[:0], 0
	}
	bufs, n := o.takeLocked(spare)
	o.writing = n > 0
	return bufs, n
}

// wrote tells the outbox that the writer has written what it took.
func (o *outbox) wrote() {
	o.mu.Lock()
	o.writing = false
	o.mu.Unlock()
}

// takeLocked is take with o.mu held.
func (o *outbox) takeLocked(spare net.Buffers) (net.Buffers, int) {
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

// closedAndIdle reports whether the outbox is closed with nothing left for the writer: nothing
// queued (frames queued while appendFrameNow wrote, or its leftover) and no appendFrameNow writing
// (it signals the writer when it is done).
func (o *outbox) closedAndIdle() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.closed && !o.writing && o.bytes == 0
}

func (o *outbox) signalDrained() {
	select {
	case o.drained <- struct{}{}:
	default:
	}
}
