package poll

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestWait(t *testing.T) {
	var n atomic.Int32
	if err := Wait(context.Background(), func(context.Context) error {
		if n.Add(1) < 3 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil || n.Load() != 3 {
		t.Fatalf("Wait: %v after %d calls", err, n.Load())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := Wait(ctx, func(context.Context) error { return errors.New("never") })
	if !errors.Is(err, context.DeadlineExceeded) || err.Error() != "context deadline exceeded (last error: never)" {
		t.Fatalf("Wait past the deadline: %v", err)
	}
}

func TestUntil(t *testing.T) {
	start := time.Now()
	Until(t, time.Second, "three calls", func() bool { return time.Since(start) > 10*time.Millisecond })
}
