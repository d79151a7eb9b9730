package checker

import (
	"errors"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPayloadRoundTrip(t *testing.T) {
	for _, size := range []int{0, 1, 10, 100, 1024, 1 << 20} {
		b := Payload("prod-a", 42, size)
		if len(b) < size {
			t.Fatalf("size %d: got %d bytes", size, len(b))
		}
		k, corrupt, err := Parse(b)
		if err != nil || corrupt != "" || k != (Key{"prod-a", 42}) {
			t.Fatalf("size %d: Parse = %v, %q, %v", size, k, corrupt, err)
		}
	}
}

func TestParseDetectsCorruption(t *testing.T) {
	b := Payload("p", 7, 256)
	b[200] ^= 1
	_, corrupt, err := Parse(b)
	if err != nil || corrupt == "" {
		t.Fatalf("flipped bit not detected: %q %v", corrupt, err)
	}
	if _, _, err := Parse([]byte("hello")); !errors.Is(err, ErrNotCheckerPayload) {
		t.Fatalf("foreign body: %v", err)
	}
	if _, corrupt, _ := Parse(Payload("p", 8, 256)[:100]); corrupt == "" {
		t.Fatal("truncated body not detected")
	}
}

func send(c *Checker, producer string, from, to int64, state SendState) {
	for s := from; s <= to; s++ {
		c.Sent(producer, s, 64)
		switch state {
		case Acked:
			c.Acked(producer, s, "id")
		case Failed:
			c.Failed(producer, s, errors.New("timeout"))
		}
	}
}

func receive(c *Checker, stream, producer string, seqs ...int64) {
	for _, s := range seqs {
		c.Received(stream, Payload(producer, s, 64), "id")
	}
}

func TestVerify(t *testing.T) {
	cases := []struct {
		name    string
		setup   func(c *Checker)
		exp     Expect
		problem string // substring of the single expected problem; empty: OK
	}{
		{"all delivered in order", func(c *Checker) {
			send(c, "a", 0, 4, Acked)
			receive(c, "s", "a", 0, 1, 2, 3, 4)
		}, Expect{}, ""},
		{"loss", func(c *Checker) {
			send(c, "a", 0, 4, Acked)
			receive(c, "s", "a", 0, 1, 4)
		}, Expect{}, "LOSS: 2 acked message(s) never received: a#2-3"},
		{"duplicate", func(c *Checker) {
			send(c, "a", 0, 2, Acked)
			receive(c, "s", "a", 0, 1, 1, 2)
		}, Expect{}, "DUPLICATE: 1: a#1"},
		{"duplicate allowed", func(c *Checker) {
			send(c, "a", 0, 2, Acked)
			receive(c, "s", "a", 0, 1, 1, 2)
		}, Expect{AllowDuplicates: true}, ""},
		{"order", func(c *Checker) {
			send(c, "a", 0, 2, Acked)
			receive(c, "s", "a", 0, 2, 1)
		}, Expect{}, "ORDER: 1: a#1 after a#2"},
		{"order not checked", func(c *Checker) {
			send(c, "a", 0, 2, Acked)
			receive(c, "s", "a", 0, 2, 1)
		}, Expect{NoOrder: true}, ""},
		{"interleaved producers keep their own order", func(c *Checker) {
			send(c, "a", 0, 2, Acked)
			send(c, "b", 0, 2, Acked)
			receive(c, "s", "b", 0)
			receive(c, "s", "a", 0, 1)
			receive(c, "s", "b", 1, 2)
			receive(c, "s", "a", 2)
		}, Expect{}, ""},
		{"failed send may arrive once", func(c *Checker) {
			send(c, "a", 0, 1, Acked)
			send(c, "a", 2, 3, Failed)
			receive(c, "s", "a", 0, 1, 2)
		}, Expect{}, ""},
		{"failed send arriving twice is a duplicate", func(c *Checker) {
			send(c, "a", 0, 0, Failed)
			receive(c, "s", "a", 0, 0)
		}, Expect{}, "DUPLICATE"},
		{"never sent", func(c *Checker) {
			receive(c, "s", "ghost", 3)
		}, Expect{}, "UNKNOWN (never sent): 1: ghost#3"},
		{"foreign body", func(c *Checker) {
			c.Received("s", []byte("hello"), "id")
		}, Expect{}, "that no checker producer sent"},
		{"unexpected producer", func(c *Checker) {
			send(c, "a", 0, 0, Acked)
			send(c, "b", 0, 0, Acked)
			receive(c, "s", "a", 0)
			receive(c, "s", "b", 0)
		}, Expect{Producers: func(p string) bool { return p == "a" }}, "UNEXPECTED producer: 1: b#0"},
		{"partial suffix", func(c *Checker) {
			send(c, "a", 0, 9, Acked)
			receive(c, "s", "a", 5, 6, 7, 8, 9)
		}, Expect{Partial: true}, ""},
		{"partial with a hole", func(c *Checker) {
			send(c, "a", 0, 9, Acked)
			receive(c, "s", "a", 5, 6, 8, 9)
		}, Expect{Partial: true}, "LOSS: 1 acked message(s) never received: a#7"},
		{"corrupt", func(c *Checker) {
			send(c, "a", 0, 0, Acked)
			b := Payload("a", 0, 64)
			b[63] ^= 0xff
			c.Received("s", b, "1:2:-1")
		}, Expect{}, "CORRUPT: 1: a#0 at 1:2:-1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := New()
			tc.setup(c)
			rep := c.Verify("s", tc.exp)
			if tc.problem == "" {
				if !rep.OK() {
					t.Fatalf("want OK, got %s", rep)
				}
				return
			}
			if len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], tc.problem) {
				t.Fatalf("want one problem containing %q, got %s", tc.problem, rep)
			}
		})
	}
}

func TestCountsAndLateError(t *testing.T) {
	c := New()
	send(c, "a", 0, 2, Acked)
	c.Sent("a", 3, 10)
	c.Failed("a", 0, errors.New("late")) // does not undo the receipt
	acked, failed, pending := c.Counts()
	if acked != 3 || failed != 0 || pending != 1 {
		t.Fatalf("Counts = %d %d %d", acked, failed, pending)
	}
	receive(c, "s", "a", 0, 1, 1)
	if n := c.ReceivedCount("s"); n != 3 {
		t.Fatalf("ReceivedCount = %d", n)
	}
	if n := c.DistinctReceived("s", Expect{}); n != 2 {
		t.Fatalf("DistinctReceived = %d", n)
	}
}
