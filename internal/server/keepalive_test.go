package server

import (
	"testing"
	"time"
)

// TestKeepAliveDecisions: ticks on time ping a client silent for an interval and close it after
// two; a tick that comes late (this process was not running) never closes, the next one on time does.
func TestKeepAliveDecisions(t *testing.T) {
	const iv = time.Second
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	k := keepAlive{interval: iv, lastTick: t0}
	lastRead := t0
	steps := []struct {
		now  time.Duration
		want keepAliveAction
	}{
		{500 * time.Millisecond, keepAliveNothing},
		{1000 * time.Millisecond, keepAlivePing},
		{1500 * time.Millisecond, keepAlivePing},
		{2000 * time.Millisecond, keepAliveClose},
	}
	for _, s := range steps {
		if got := k.onTick(at(s.now), lastRead); got != s.want {
			t.Fatalf("on-time tick at %v: %v, want %v", s.now, got, s.want)
		}
	}

	// The process stalls for 2 s right after a PING went out: the client's PONG waits unread.
	k = keepAlive{interval: iv, lastTick: at(1000 * time.Millisecond)}
	if got := k.onTick(at(3100*time.Millisecond), lastRead); got == keepAliveClose {
		t.Fatal("a tick 2.1 s late closed the connection")
	}
	// The reader then sees the PONG; the next tick is on time and finds a live client.
	lastRead = at(3110 * time.Millisecond)
	if got := k.onTick(at(3500*time.Millisecond), lastRead); got != keepAliveNothing {
		t.Fatalf("tick after the stall: %v, want nothing", got)
	}
	// A client that really is silent is closed by the first tick on time after a late one.
	k = keepAlive{interval: iv, lastTick: at(1000 * time.Millisecond)}
	if got := k.onTick(at(3100*time.Millisecond), t0); got != keepAlivePing {
		t.Fatalf("late tick, silent client: %v, want a ping", got)
	}
	if got := k.onTick(at(3600*time.Millisecond), t0); got != keepAliveClose {
		t.Fatalf("tick on time after a late one, silent client: %v, want close", got)
	}
}
