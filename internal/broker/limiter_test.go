package broker

import (
	"context"
	"testing"
	"testing/synctest"
)

// TestMemoryLimiterParentAndWait runs in a synctest bubble: synctest.Wait returns once the waiter
// is blocked, so "Wait did not return" is checked without waiting for time to pass.
func TestMemoryLimiterParentAndWait(t *testing.T) {
	synctest.Test(t, testMemoryLimiterParentAndWait)
}

func testMemoryLimiterParentAndWait(t *testing.T) {
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
	synctest.Wait()
	select {
	case <-done:
		t.Fatal("Wait returned while over the limit")
	default:
	}
	b.Release(80)
	synctest.Wait()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	default:
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

// AcquireN/ReleaseN charge and release a group at once, here and in the ancestors.
func TestMemoryLimiterGroups(t *testing.T) {
	parent := NewMemoryLimiter(1000, 0, nil)
	a := NewMemoryLimiter(0, 10, parent)
	a.AcquireN(300, 4)
	if b, n := a.InUse(); b != 300 || n != 4 {
		t.Fatalf("a in use %d/%d", b, n)
	}
	if b, n := parent.InUse(); b != 300 || n != 4 {
		t.Fatalf("parent in use %d/%d", b, n)
	}
	if a.Over() {
		t.Fatal("over below both limits")
	}
	a.AcquireN(100, 6)
	if !a.Over() || parent.Over() {
		t.Fatal("count limit of a not reached by a group")
	}
	a.ReleaseN(100, 6)
	a.AcquireN(700, 1)
	if !a.Over() || !parent.Over() {
		t.Fatal("byte limit of the parent not reached by a group")
	}
	a.ReleaseN(700, 1)
	a.ReleaseN(300, 4)
	if b, n := parent.InUse(); b != 0 || n != 0 {
		t.Fatalf("parent in use %d/%d after release", b, n)
	}
}
