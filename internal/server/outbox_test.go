package server

import (
	"bytes"
	"fmt"
	"net"
	"sync"
	"testing"
)

// Small frames appended to shared blocks, interleaved with pushed frames and with the writer taking
// what is queued, come out whole and in order; bytes handed to the writer are never overwritten.
func TestOutboxAppendFrame(t *testing.T) {
	o := newOutbox()
	var want, got bytes.Buffer
	var taken []net.Buffers
	for i := range 2000 {
		frame := []byte(fmt.Sprintf("<small %d>", i))
		switch i % 7 {
		case 3:
			big := bytes.Repeat([]byte{byte(i)}, 300)
			o.push(big)
			want.Write(big)
		case 5:
			bufs, _ := o.take(nil)
			taken = append(taken, bufs)
		}
		o.appendFrame(func(dst []byte) []byte { return append(dst, frame...) })
		want.Write(frame)
	}
	bufs, _ := o.take(nil)
	taken = append(taken, bufs)
	for _, bufs := range taken {
		for _, b := range bufs {
			got.Write(b)
		}
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("outbox bytes differ: %d vs %d", got.Len(), want.Len())
	}
	if o.bytes != 0 {
		t.Fatalf("%d bytes still counted", o.bytes)
	}
	o.close()
	if o.appendFrame(func(dst []byte) []byte { return append(dst, 'x') }) {
		t.Fatal("appendFrame on a closed outbox")
	}
}

// A writer reading taken bytes while small frames are appended: no data race (go test -race).
func TestOutboxAppendFrameConcurrentWriter(t *testing.T) {
	o := newOutbox()
	var wg sync.WaitGroup
	var total int
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		count := func() int {
			bufs, _ := o.take(nil)
			for _, b := range bufs {
				total += len(b)
			}
			return len(bufs)
		}
		for {
			select {
			case <-done:
				// Everything was appended before done was closed: drain what is left.
				for count() > 0 {
				}
				return
			default:
				count()
			}
		}
	}()
	for i := range 10000 {
		o.appendFrame(func(dst []byte) []byte { return fmt.Appendf(dst, "%08d", i) })
	}
	close(done)
	wg.Wait()
	if total != 80000 {
		t.Fatalf("%d bytes written, want 80000", total)
	}
}
