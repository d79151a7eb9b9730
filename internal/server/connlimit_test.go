package server

import (
	"net"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

func TestAddrLimiter(t *testing.T) {
	if l := newAddrLimiter(0); l != nil || !l.acquire("a") {
		t.Fatal("a limit of 0 must admit everything")
	}
	l := newAddrLimiter(2)
	for i, want := range []bool{true, true, false} {
		if got := l.acquire("a"); got != want {
			t.Fatalf("connection %d from a: admitted %v, want %v", i+1, got, want)
		}
	}
	if !l.acquire("b") {
		t.Fatal("another address was refused")
	}
	l.release("a")
	if !l.acquire("a") {
		t.Fatal("a released slot was not reused")
	}
	l.release("a")
	l.release("a")
	l.release("b")
	if len(l.counts) != 0 {
		t.Fatalf("counts left: %v", l.counts)
	}
	if got := sourceOf(&net.TCPAddr{IP: net.ParseIP("10.0.0.1"), Port: 5}); got != "10.0.0.1" {
		t.Fatalf("sourceOf = %q", got)
	}
}

// TestConnectionsPerAddressLimit: beyond MaxConnectionsPerAddress a new connection from the same
// address is closed at once; the ones open are served, and a closed one frees its slot.
func TestConnectionsPerAddressLimit(t *testing.T) {
	s := startServer(t, Options{MaxConnectionsPerAddress: 2})
	a, b := dialRaw(t, s.addr), dialRaw(t, s.addr)
	a.connect()
	b.connect()
	c := dialRaw(t, s.addr)
	c.expectClosed()
	if got := s.Stats().RefusedPerAddress; got != 1 {
		t.Fatalf("RefusedPerAddress = %d", got)
	}
	a.send(&pulsarpb.CommandPing{})
	a.expect(pulsarpb.BaseCommand_PONG)
	b.nc.Close()
	poll.Until(t, 5*time.Second, "the closed connection's slot freed", func() bool { return s.Stats().ConnectionsOpen == 1 })
	d := dialRaw(t, s.addr)
	d.connect()
}

// TestConnectDeadline: a client that opens a connection and does not finish CONNECT (silent, or
// stopping in the middle of the frame) is closed by the deadline, not held open.
func TestConnectDeadline(t *testing.T) {
	s := startServer(t, Options{KeepAliveInterval: 300 * time.Millisecond})
	silent := dialRaw(t, s.addr)
	partial := dialRaw(t, s.addr)
	partial.writeRaw([]byte{0, 0, 0, 40, 0, 0}) // a frame head announcing more than is sent
	start := time.Now()
	silent.expectClosed()
	partial.expectClosed()
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("closed after %v", took)
	}
}
