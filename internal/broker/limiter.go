package broker

import (
	"context"
	"sync"
	"sync/atomic"
)

// MemoryLimiter accounts bytes and requests of in-flight publishes against limits. Acquire never
// refuses (a request already read from the socket must be processed); the caller throttles by
// calling Wait before reading the next request, which returns once this limiter and every ancestor
// are back under their limits. The server keeps one per connection as a child of
// Broker.PublishLimiter(), so both the per-connection and the broker-wide budget apply.
//
// The counters are atomics: every publish acquires and releases on two limiters and the reader
// checks Over after each request, from different goroutines, and with a mutex each of those was a
// lock round trip. The mutex only guards the waiters; Release takes it only when someone waits.
type MemoryLimiter struct {
	parent   *MemoryLimiter
	maxBytes int64 // <=0 = unlimited
	maxCount int64 // <=0 = unlimited

	bytes, count atomic.Int64
	nwait        atomic.Int32 // len(waiters), readable without mu

	mu      sync.Mutex
	waiters []chan struct{}
}

// NewMemoryLimiter returns a limiter with the given byte and request limits (<=0 = unlimited),
// optionally the child of parent (acquisitions are charged to both).
func NewMemoryLimiter(maxBytes, maxCount int64, parent *MemoryLimiter) *MemoryLimiter {
	return &MemoryLimiter{parent: parent, maxBytes: maxBytes, maxCount: maxCount}
}

// Acquire charges one request of n bytes.
func (l *MemoryLimiter) Acquire(n int64) {
	for x := l; x != nil; x = x.parent {
		x.bytes.Add(n)
		x.count.Add(1)
	}
}

// AcquireN charges count requests of bytes bytes in all (a group of SENDs).
func (l *MemoryLimiter) AcquireN(bytes, count int64) {
	for x := l; x != nil; x = x.parent {
		x.bytes.Add(bytes)
		x.count.Add(count)
	}
}

// Release returns one request of n bytes.
func (l *MemoryLimiter) Release(n int64) { l.ReleaseN(n, 1) }

// ReleaseN returns count requests of bytes bytes in all.
func (l *MemoryLimiter) ReleaseN(bytes, count int64) {
	for x := l; x != nil; x = x.parent {
		x.bytes.Add(-bytes)
		x.count.Add(-count)
		// A waiter registers (nwait) before it checks the counters again, and the counters were
		// updated before nwait is read here: one of the two sees the other, so none is missed.
		if x.nwait.Load() > 0 {
			x.wakeIfUnder()
		}
	}
}

// wakeIfUnder wakes every waiter if the limiter is under its limits.
func (l *MemoryLimiter) wakeIfUnder() {
	l.mu.Lock()
	var wake []chan struct{}
	if !l.over() {
		wake, l.waiters = l.waiters, nil
		l.nwait.Store(0)
	}
	l.mu.Unlock()
	for _, w := range wake {
		close(w)
	}
}

func (l *MemoryLimiter) over() bool {
	return (l.maxBytes > 0 && l.bytes.Load() >= l.maxBytes) || (l.maxCount > 0 && l.count.Load() >= l.maxCount)
}

// Over reports whether this limiter or an ancestor is at or over its limit.
func (l *MemoryLimiter) Over() bool {
	for x := l; x != nil; x = x.parent {
		if x.over() {
			return true
		}
	}
	return false
}

// Wait returns nil once this limiter and its ancestors are under their limits, or ctx's error.
func (l *MemoryLimiter) Wait(ctx context.Context) error {
	for {
		var ch chan struct{}
		for x := l; x != nil && ch == nil; x = x.parent {
			if !x.over() {
				continue
			}
			ch = make(chan struct{})
			x.mu.Lock()
			x.waiters = append(x.waiters, ch)
			x.nwait.Store(int32(len(x.waiters)))
			x.mu.Unlock()
			// Released between the check and the registration: Release may not have seen us.
			if !x.over() {
				x.wakeIfUnder()
			}
		}
		if ch == nil {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// InUse returns the bytes and requests currently charged to this limiter (children included).
func (l *MemoryLimiter) InUse() (bytes, count int64) {
	return l.bytes.Load(), l.count.Load()
}
