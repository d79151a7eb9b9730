package broker

import (
	"context"
	"testing"
	"time"
)

func TestMemoryLimiterParentAndWait(t *testing.T) {
	parent := NewMemoryLimiter(100, 0, nil)
	a := NewMemoryLimiter(0, 2, parent)
	b := NewMemoryLimiter(0, 0, parent)
	a.Acquire(10)
	if a.Over() {
		t.Fatal("over after one request")
	}
	a.Acquire(10)
	if !a.Over() || b.Over() {
		t.Fatal("count limit of a not applied to a alone")
	}
	b.Acquire(80)
	if !b.Over() || !parent.Over() {
		t.Fatal("parent byte limit not reached")
	}
	done := make(chan error, 1)
	go func() { done <- b.Wait(context.Background()) }()
	select {
	case <-done:
		t.Fatal("Wait returned while over the limit")
	case <-time.After(20 * time.Millisecond):
	}
	b.Release(80)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return after release")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Wait(ctx); err == nil {
		t.Fatal("Wait on a (count limit) with cancelled ctx returned nil")
	}
	a.Release(10)
	a.Release(10)
	if bytes, count := parent.InUse(); bytes != 0 || count != 0 {
		t.Fatalf("parent in use %d/%d", bytes, count)
	}
}
