package e2e

import (
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/tests/internal/checker"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// frame builds a simple-command frame around an arbitrary "command" body:
// [totalSize u32][commandSize u32][command].
func frame(cmd []byte) []byte {
	b := make([]byte, 8+len(cmd))
	binary.BigEndian.PutUint32(b[0:], uint32(4+len(cmd)))
	binary.BigEndian.PutUint32(b[4:], uint32(len(cmd)))
	copy(b[8:], cmd)
	return b
}

// TestBadInputDoesNotCrash throws garbage at the binary port of a real `meridian standalone` (random
// bytes, oversized and inconsistent frame sizes, garbage protobuf, HTTP, truncated frames, abrupt
// disconnects) and checks that the broker closes those connections, stays up, logs no panic, and
// still serves a real client.
func TestBadInputDoesNotCrash(t *testing.T) {
	p := harness.StartStandalone(t, harness.Options{})
	addr := p.ServiceURL()[len("pulsar://"):]
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		return b
	}
	hugeSize := make([]byte, 8)
	binary.BigEndian.PutUint32(hugeSize[0:], 0xFFFFFFF0)
	binary.BigEndian.PutUint32(hugeSize[4:], 16)
	cmdLongerThanFrame := make([]byte, 12)
	binary.BigEndian.PutUint32(cmdLongerThanFrame[0:], 8)
	binary.BigEndian.PutUint32(cmdLongerThanFrame[4:], 1000)
	zeroSize := make([]byte, 8)
	cases := []struct {
		name string
		data []byte
		// mustClose: the broker must close the connection (a frame it cannot accept). Otherwise the
		// broker may also keep waiting for more bytes; the test then closes the connection itself.
		mustClose bool
	}{
		{"random 64KiB", random(64 * 1024), true},
		{"oversized frame", hugeSize, true},
		{"command larger than frame", cmdLongerThanFrame, true},
		{"zero sizes", zeroSize, true},
		{"garbage protobuf", frame(random(200)), true},
		{"unknown command type", frame([]byte{0x08, 0xE7, 0x07}), true}, // BaseCommand.type = 999
		{"empty BaseCommand", frame(nil), true},
		{"http request", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), true},
		{"truncated frame", frame(random(100))[:50], false},
		{"nothing", nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			defer conn.Close()
			if len(tc.data) > 0 {
				if _, err := conn.Write(tc.data); err != nil && !isConnClosed(err) {
					t.Fatalf("write: %v", err)
				}
			}
			if !tc.mustClose {
				return
			}
			// The broker may answer (an ERROR frame) before closing; read until EOF or reset.
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err = io.Copy(io.Discard, io.LimitReader(conn, 1<<20))
			if err != nil && !isConnClosed(err) {
				t.Fatalf("the broker did not close the connection within 10s: %v", err)
			}
		})
	}

	// Many abrupt connects and disconnects.
	for i := 0; i < 200; i++ {
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		if tcp, ok := conn.(*net.TCPConn); ok && i%2 == 0 {
			_ = tcp.SetLinger(0) // RST instead of FIN
		}
		conn.Close()
	}

	// Still ready, and a real client still works.
	resp, err := http.Get(p.WebURL() + "/admin/v2/brokers/ready")
	if err != nil {
		t.Fatalf("ready after bad input: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("ready after bad input: HTTP %d", resp.StatusCode)
	}
	client := harness.NewClient(t, p, nil)
	topic := harness.Topic(t)
	chk := checker.New()
	cons := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic})
	sendSync(t, chk, prod, "p", 0, 10, 64)
	receiveN(t, chk, "s", cons, 10, 30*time.Second, false)
	verify(t, chk, "s", checker.Expect{})
	if !p.Running() {
		t.Fatal("broker process exited")
	}
}

func isConnClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, net.ErrClosed)
}
