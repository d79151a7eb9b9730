package server

import (
	"net"
	"sync"
)

// addrLimiter bounds the connections open from one source address (Pulsar's
// brokerMaxConnectionsPerIp), so one host cannot take every file descriptor of the broker. A
// max of 0 turns it off.
type addrLimiter struct {
	max    int
	mu     sync.Mutex
	counts map[string]int
}

func newAddrLimiter(max int) *addrLimiter {
	if max <= 0 {
		return nil
	}
	return &addrLimiter{max: max, counts: map[string]int{}}
}

// sourceOf is the address a limit counts: the IP, without the port.
func sourceOf(addr net.Addr) string {
	if tcp, ok := addr.(*net.TCPAddr); ok {
		return tcp.IP.String()
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	return host
}

// acquire counts one more connection from source; false (nothing counted) when it would exceed
// the limit. A nil limiter admits everything.
func (l *addrLimiter) acquire(source string) bool {
	if l == nil {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.counts[source] >= l.max {
		return false
	}
	l.counts[source]++
	return true
}

// release uncounts a connection acquire admitted.
func (l *addrLimiter) release(source string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.counts[source] <= 1 {
		delete(l.counts, source)
		return
	}
	l.counts[source]--
}
