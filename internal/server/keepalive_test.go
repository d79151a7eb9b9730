package server

import (
	"testing"
	"time"
)

// TestKeepAliveDecisions: ticks on time ping a client silent for an interval and close it after
// two; a tick that comes late (this process was not running) never closes, the next one on time does;
// a pause of the reader (ours) is not the client's silence.
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
		if got := k.onTick(at(s.now), lastRead, false); got != s.want {
			t.Fatalf("on-time tick at %v: %v, want %v", s.now, got, s.want)
		}
	}

	// The process stalls for 2 s right after a PING went out: the client's PONG waits unread.
	k = keepAlive{interval: iv, lastTick: at(1000 * time.Millisecond)}
	if got := k.onTick(at(3100*time.Millisecond), lastRead, false); got == keepAliveClose {
		t.Fatal("a tick 2.1 s late closed the connection")
	}
	// The reader then sees the PONG; the next tick is on time and finds a live client.
	lastRead = at(3110 * time.Millisecond)
	if got := k.onTick(at(3500*time.Millisecond), lastRead, false); got != keepAliveNothing {
		t.Fatalf("tick after the stall: %v, want nothing", got)
	}
	// A client that really is silent is closed by the first tick on time after a late one.
	k = keepAlive{interval: iv, lastTick: at(1000 * time.Millisecond)}
	if got := k.onTick(at(3100*time.Millisecond), t0, false); got != keepAlivePing {
		t.Fatalf("late tick, silent client: %v, want a ping", got)
	}
	if got := k.onTick(at(3600*time.Millisecond), t0, false); got != keepAliveClose {
		t.Fatalf("tick on time after a late one, silent client: %v, want close", got)
	}

	// The reader pauses for 5 s (a stalled disk under its group commit) with the client's pings
	// unread: no tick closes meanwhile, and the client's silence counts from the pause's last tick.
	k = keepAlive{interval: iv, lastTick: t0}
	for d := 500 * time.Millisecond; d <= 5000*time.Millisecond; d += 500 * time.Millisecond {
		if got := k.onTick(at(d), t0, true); got != keepAliveNothing {
			t.Fatalf("tick at %v with the reader paused: %v, want nothing", d, got)
		}
	}
	if got := k.onTick(at(5500*time.Millisecond), t0, false); got != keepAliveNothing {
		t.Fatalf("first tick after the pause: %v, want nothing", got)
	}
	// A client that stays silent after the pause is pinged, then closed, as after a read.
	if got := k.onTick(at(6000*time.Millisecond), t0, false); got != keepAlivePing {
		t.Fatalf("an interval after the pause: %v, want a ping", got)
	}
	if got := k.onTick(at(6500*time.Millisecond), t0, false); got != keepAlivePing {
		t.Fatalf("1.5 intervals after the pause: %v, want a ping", got)
	}
	if got := k.onTick(at(7000*time.Millisecond), t0, false); got != keepAliveClose {
		t.Fatalf("two intervals after the pause: %v, want close", got)
	}
}
