// Package freeport hands tests loopback TCP ports for servers they start, in-process or as
// another process. A port comes from below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range): a port that Listen(":0") returned is in that range, and between
// the check and the server's bind any outgoing connection on the machine (another test package's
// client, say) may get it as its source port, so the server fails with "address already in use".
// Below the range only another explicit bind can take it.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// lowest is the first port handed out: well above the ports of common services.
const lowest = 10000

var (
	handedOutMu sync.Mutex
	handedOut   = map[int]bool{} // no port is handed out twice in one process
)

// Port returns a loopback TCP port that is free now and that no earlier call in this process
// returned.
func Port(t testing.TB) int {
	t.Helper()
	return Base(t)
}

// Addr returns "127.0.0.1:<Port>".
func Addr(t testing.TB) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(Port(t))
}

// Base returns a port p such that p and p+offset, for each offset, are free now and were not
// handed out before in this process (a layout of several listeners, such as
// `meridian standalone --clusters`, which puts cluster i's listener at base+10*i).
func Base(t testing.TB, offsets ...int) int {
	t.Helper()
	p, err := Find(offsets...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Find is Base for code without a testing.TB (a helper that starts a server process and
// returns an error).
func Find(offsets ...int) (int, error) {
	end := ephemeralStart()
	span := 0
	for _, o := range offsets {
		span = max(span, o)
	}
	if end-span <= lowest {
		return 0, fmt.Errorf("freeport: no room below the ephemeral range (it starts at %d)", end)
	}
	for range 1000 {
		p := lowest + rand.IntN(end-span-lowest)
		ports := []int{p}
		for _, o := range offsets {
			ports = append(ports, p+o)
		}
		if claim(ports) {
			return p, nil
		}
	}
	return 0, fmt.Errorf("freeport: no free port below %d in 1000 tries", end)
}

// claim marks ports handed out if each is free and none was handed out before.
func claim(ports []int) bool {
	handedOutMu.Lock()
	defer handedOutMu.Unlock()
	for _, p := range ports {
		if handedOut[p] || !free(p) {
			return false
		}
	}
	for _, p := range ports {
		handedOut[p] = true
	}
	return true
}

func free(port int) bool {
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	_ = ln.Close()
	return true
}

// ephemeralStart reads the first port of the kernel's ephemeral range; 32768 (Linux's default)
// where it cannot be read (no /proc). A range that starts at or below lowest leaves no room:
// Find then reports an error instead of handing out ports from inside the range.
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return 32768
	}
	start, err := strconv.Atoi(fields[0])
	if err != nil {
		return 32768
	}
	return start
}
