package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestPortsAreBelowTheEphemeralRangeAndDistinct(t *testing.T) {
	end := ephemeralStart()
	seen := map[int]bool{}
	for range 50 {
		p := Port(t)
		if p < lowest || p >= end {
			t.Fatalf("port %d outside [%d, %d)", p, lowest, end)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}

func TestBaseLeavesEveryOffsetFree(t *testing.T) {
	p := Base(t, 10, 20)
	for _, q := range []int{p, p + 10, p + 20} {
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(q))
		if err != nil {
			t.Fatalf("port %d of the layout: %v", q, err)
		}
		_ = ln.Close()
	}
	if q := Port(t); q == p || q == p+10 || q == p+20 {
		t.Fatalf("port %d handed out again", q)
	}
}
