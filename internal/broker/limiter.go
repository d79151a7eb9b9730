package broker

import (
	"context"
	"sync"
)

// MemoryLimiter accounts bytes and requests of in-flight publishes against limits. Acquire never
// refuses (a request already read from the socket must be processed); the caller throttles by
// calling Wait before reading the next request, which returns once this limiter and every ancestor
// are back under their limits. The server keeps one per connection as a child of
// Broker.PublishLimiter(), so both the per-connection and the broker-wide budget apply.
type MemoryLimiter struct {
	parent   *MemoryLimiter
	maxBytes int64 // <=0 = unlimited
	maxCount int64 // <=0 = unlimited

	mu      sync.Mutex
	bytes   int64
	count   int64
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
		x.mu.Lock()
		x.bytes += n
		x.count++
		x.mu.Unlock()
	}
}

// Release returns one request of n bytes.
func (l *MemoryLimiter) Release(n int64) {
	for x := l; x != nil; x = x.parent {
		x.mu.Lock()
		x.bytes -= n
		x.count--
		var wake []chan struct{}
		if !x.overLocked() {
			wake, x.waiters = x.waiters, nil
		}
		x.mu.Unlock()
		for _, w := range wake {
			close(w)
		}
	}
}

func (l *MemoryLimiter) overLocked() bool {
	return (l.maxBytes > 0 && l.bytes >= l.maxBytes) || (l.maxCount > 0 && l.count >= l.maxCount)
}

// Over reports whether this limiter or an ancestor is at or over its limit.
func (l *MemoryLimiter) Over() bool {
	for x := l; x != nil; x = x.parent {
		x.mu.Lock()
		over := x.overLocked()
		x.mu.Unlock()
		if over {
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
			x.mu.Lock()
			if x.overLocked() {
				ch = make(chan struct{})
				x.waiters = append(x.waiters, ch)
			}
			x.mu.Unlock()
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
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bytes, l.count
}
