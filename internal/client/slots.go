package client

import (
	"context"
	"sync"
)

// slotPool counts the sends a producer may still queue (ProducerOptions.MaxPending). Taking or
// returning many slots costs one lock: a forwarder queues and settles hundreds of sends at a time,
// where a channel of tokens cost one channel operation per message each way.
type slotPool struct {
	mu      sync.Mutex
	free    int
	changed chan struct{} // made by a waiting take, closed by the next give
}

func newSlotPool(n int) *slotPool { return &slotPool{free: n} }

// take acquires n slots, all at once, waiting while fewer are free; it gives up (taking none)
// when ctx ends (ctx.Err()) or stop is closed (ErrClosed). n must not exceed the pool's size.
func (s *slotPool) take(ctx context.Context, stop <-chan struct{}, n int) error {
	for {
		s.mu.Lock()
		if s.free >= n {
			s.free -= n
			s.mu.Unlock()
			return nil
		}
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-stop:
			return ErrClosed
		}
	}
}

// give returns n slots.
func (s *slotPool) give(n int) {
	if n <= 0 {
		return
	}
	s.mu.Lock()
	s.free += n
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
	s.mu.Unlock()
}
