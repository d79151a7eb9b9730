package server

import (
	"bytes"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/poll"
	"github.com/meridian-mq/meridian/internal/wire"
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
			o.wrote()
			taken = append(taken, bufs)
		}
		o.appendFrameNow(func(dst []byte) []byte { return append(dst, frame...) }, nil)
		want.Write(frame)
	}
	bufs, _ := o.take(nil)
	o.wrote()
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
	if o.appendFrameNow(func(dst []byte) []byte { return append(dst, 'x') }, nil) {
		t.Fatal("appendFrameNow on a closed outbox")
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
			o.wrote()
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
		o.appendFrameNow(func(dst []byte) []byte { return fmt.Appendf(dst, "%08d", i) }, nil)
	}
	close(done)
	wg.Wait()
	if total != 80000 {
		t.Fatalf("%d bytes written, want 80000", total)
	}
}

// A small frame that comes alone is written at once by appendFrameNow, without waking the writer; a
// short write leaves the rest at the front of the queue, before later frames; frames that come close
// together are left to the writer.
func TestOutboxAppendFrameNow(t *testing.T) {
	o := newOutbox()
	var direct [][]byte
	short := -1 // bytes the next tryWrite takes; -1: all
	tryWrite := func(bufs net.Buffers) int {
		var all []byte
		for _, b := range bufs {
			all = append(all, b...)
		}
		n := len(all)
		if short >= 0 {
			n = short
		}
		direct = append(direct, all[:n])
		return n
	}
	frame := func(s string) func([]byte) []byte { return func(dst []byte) []byte { return append(dst, s...) } }

	o.appendFrameNow(frame("alone"), tryWrite)
	if len(direct) != 1 || string(direct[0]) != "alone" || o.bytes != 0 {
		t.Fatalf("written at once %q, %d bytes left queued", direct, o.bytes)
	}
	select {
	case <-o.wake:
		t.Fatal("the writer was woken for a frame written at once")
	default:
	}

	o.lastSmall = time.Now()
	o.appendFrameNow(frame("close-behind"), tryWrite) // within sparseGap of the previous one
	if len(direct) != 1 || o.bytes != len("close-behind") {
		t.Fatalf("a frame close behind another was written at once (%q)", direct)
	}
	bufs, _ := o.take(nil)
	o.wrote()
	if got := string(bytes.Join(bufs, nil)); got != "close-behind" {
		t.Fatalf("the writer took %q", got)
	}

	o.lastSmall = time.Time{} // alone again
	short = 3
	o.appendFrameNow(frame("partial"), tryWrite)
	o.appendFrameNow(frame("-later"), nil)
	bufs, _ = o.take(nil)
	o.wrote()
	if got := string(direct[1]) + string(bytes.Join(bufs, nil)); got != "partial-later" {
		t.Fatalf("after a short write the bytes go out as %q", got)
	}
}

// Frames queued from one goroutine, some alone and written at once, some left to a writer running
// beside it, leave in the order they were queued (go test -race).
func TestOutboxAppendFrameNowKeepsOrder(t *testing.T) {
	o := newOutbox()
	var mu sync.Mutex
	var out bytes.Buffer
	write := func(bufs net.Buffers) {
		mu.Lock()
		defer mu.Unlock()
		for _, b := range bufs {
			out.Write(b)
		}
	}
	tryWrite := func(bufs net.Buffers) int { write(bufs); return len(bytes.Join(bufs, nil)) }
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the writer
		defer wg.Done()
		for {
			select {
			case <-o.wake:
			case <-stop:
				return
			}
			for {
				bufs, n := o.take(nil)
				if n == 0 {
					break
				}
				write(bufs)
				o.wrote()
			}
		}
	}()
	var want bytes.Buffer
	for i := range 400 {
		s := fmt.Sprintf("<%d>", i)
		want.WriteString(s)
		if i%9 == 0 {
			time.Sleep(sparseGap) // alone: written at once
		}
		o.appendFrameNow(func(dst []byte) []byte { return append(dst, s...) }, tryWrite)
	}
	poll.Until(t, 10*time.Second, "every frame to be written", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return out.Len() == want.Len()
	})
	close(stop)
	wg.Wait()
	if out.String() != want.String() {
		t.Fatalf("frames left out of order:\n got %q\nwant %q", out.String(), want.String())
	}
}

// A frame queued while appendFrameNow writes, with the write short, goes out after the rest of the
// frame being written (putBackLocked shifts the tail block); and an outbox closed meanwhile is not
// idle for the writer until both are written.
func TestOutboxAppendFrameNowShortWriteWithFramesBehind(t *testing.T) {
	o := newOutbox()
	var direct []byte
	tryWrite := func(bufs net.Buffers) int {
		all := bytes.Join(bufs, nil)
		o.appendFrameNow(func(dst []byte) []byte { return append(dst, "-behind"...) }, nil)
		o.appendFrameNow(func(dst []byte) []byte { return append(dst, "-and-more"...) }, nil)
		o.close()
		direct = all[:2]
		return 2
	}
	o.appendFrameNow(func(dst []byte) []byte { return append(dst, "first"...) }, tryWrite)
	if o.closedAndIdle() {
		t.Fatal("the writer would stop with frames queued")
	}
	select {
	case <-o.wake:
	default:
		t.Fatal("the writer was not woken for what the direct write left")
	}
	bufs, _ := o.take(nil)
	o.wrote()
	if got := string(direct) + string(bytes.Join(bufs, nil)); got != "first-behind-and-more" {
		t.Fatalf("bytes went out as %q", got)
	}
	if !o.closedAndIdle() {
		t.Fatal("a closed outbox with everything written is not idle")
	}
}

// A delivered entry's MESSAGE head goes into the outbox's small-frame block: queuing a delivery
// allocates nothing per entry (one block per few dozen heads), and a head too large for the block
// (a long ack set) still goes out whole, in order.
func TestSendMessageHeadNeedsNoAllocation(t *testing.T) {
	c := &conn{s: &Server{opts: Options{MaxOutboundBytes: 1 << 30}}, out: newOutbox()}
	payload := bytes.Repeat([]byte{'p'}, 1024)
	head := wire.MessageHead{ConsumerID: 7, LedgerID: 1 << 40, EntryID: 123456, Partition: -1}
	var spare net.Buffers
	allocs := testing.AllocsPerRun(2000, func() {
		head.EntryID++
		if !c.sendMessage(&head, payload) {
			t.Fatal("sendMessage refused")
		}
		if c.out.bytes > 1<<20 {
			spare, _ = c.out.take(spare)
			c.out.wrote()
		}
	})
	if allocs > 0.1 {
		t.Errorf("%.2f allocations per delivered MESSAGE, want about none", allocs)
	}

	// Bytes and order: heads of every size between pushed frames and takes.
	c = &conn{s: &Server{opts: Options{MaxOutboundBytes: 1 << 30}}, out: newOutbox()}
	var want, got bytes.Buffer
	for i := range 300 {
		h := wire.MessageHead{ConsumerID: uint64(i), LedgerID: uint64(i) << 20, EntryID: uint64(i), Partition: int32(i%3) - 1,
			RedeliveryCount: uint32(i % 2), AckSet: make([]int64, i%20)}
		for j := range h.AckSet {
			h.AckSet[j] = -1 - int64(j)
		}
		body := []byte(fmt.Sprintf("<payload %d>", i))
		hdr, err := wire.AppendMessageFrameHeader(nil, &h, len(body))
		if err != nil {
			t.Fatal(err)
		}
		want.Write(hdr)
		want.Write(body)
		if !c.sendMessage(&h, body) {
			t.Fatal("sendMessage refused")
		}
		if i%11 == 4 {
			c.out.appendFrameNow(func(dst []byte) []byte { return append(dst, "<receipt>"...) }, nil)
			want.WriteString("<receipt>")
		}
		if i%13 == 6 {
			bufs, _ := c.out.take(nil)
			c.out.wrote()
			for _, b := range bufs {
				got.Write(b)
			}
		}
	}
	bufs, _ := c.out.take(nil)
	c.out.wrote()
	for _, b := range bufs {
		got.Write(b)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("outbox bytes differ: %d vs %d", got.Len(), want.Len())
	}
}
