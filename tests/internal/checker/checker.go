// Package checker records every message a test sends and every message its consumers receive, and
// proves what a messaging system promises: no loss, no duplicates, order per producer, no
// corruption. It knows nothing about Pulsar: tests describe sends and receives with strings and
// integers, so the same checker serves single-broker tests and replication across clusters.
//
// Payloads are self-describing: Payload(producer, seq, size) builds a deterministic body that
// names its producer and sequence number, so a receiver needs nothing but the bytes (replicated
// messages, readers and admin peeks all work) and corruption is detected by rebuilding the body.
//
// A send is Acked (the broker confirmed it: it must be delivered exactly once), Failed (the client
// reported an error: it may or may not have been stored, so it may be delivered at most once), or
// still pending when Verify runs (treated like Failed).
package checker

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// SendState is what the client learned about one send.
type SendState int

const (
	// Pending: sent, no outcome yet.
	Pending SendState = iota
	// Acked: the broker acknowledged it (a receipt); it must be delivered exactly once.
	Acked
	// Failed: the client reported an error; the broker may have stored it anyway.
	Failed
)

func (s SendState) String() string {
	switch s {
	case Pending:
		return "pending"
	case Acked:
		return "acked"
	case Failed:
		return "failed"
	}
	return "SendState(" + strconv.Itoa(int(s)) + ")"
}

// Key identifies one logical message: its producer and its sequence number within that producer.
type Key struct {
	Producer string
	Seq      int64
}

func (k Key) String() string { return fmt.Sprintf("%s#%d", k.Producer, k.Seq) }

type sendRecord struct {
	state SendState
	size  int
	id    string // message id from the receipt, if any
	err   string
}

// Delivery is one received message as seen by one stream (a consumer, subscription or reader on
// one cluster).
type Delivery struct {
	Key     Key
	ID      string // message id as the receiver saw it (for reports)
	Corrupt string // non-empty when the payload did not match what the producer sent
}

// Checker collects sends and deliveries. It is safe for concurrent use.
type Checker struct {
	mu         sync.Mutex
	sends      map[Key]*sendRecord
	deliveries map[string][]Delivery // stream -> deliveries in arrival order
	foreign    map[string][]string   // stream -> payloads that are not checker payloads
}

// New returns an empty Checker.
func New() *Checker {
	return &Checker{
		sends:      make(map[Key]*sendRecord),
		deliveries: make(map[string][]Delivery),
		foreign:    make(map[string][]string),
	}
}

const magic = "chk1|"

// Payload builds the deterministic body of message seq of producer, at least size bytes long
// (longer only if the header needs it). Producer names must not contain '|'.
func Payload(producer string, seq int64, size int) []byte {
	header := magic + producer + "|" + strconv.FormatInt(seq, 10) + "|" + strconv.Itoa(size) + "|"
	n := size
	if n < len(header) {
		n = len(header)
	}
	b := make([]byte, n)
	copy(b, header)
	// Filler: a keyed pseudo-random stream, so a body moved to another message or shifted is caught.
	h := fnv.New64a()
	_, _ = h.Write([]byte(header))
	x := h.Sum64() | 1
	var word [8]byte
	for i := len(header); i < n; i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(word[:], x)
		copy(b[i:], word[:])
	}
	return b
}

// ErrNotCheckerPayload is returned by Parse for bodies that Payload did not build.
var ErrNotCheckerPayload = errors.New("not a checker payload")

// Parse reads the producer and sequence number a body claims, and whether the body is exactly what
// Payload builds for them (corrupt is non-empty otherwise).
func Parse(body []byte) (key Key, corrupt string, err error) {
	if !bytes.HasPrefix(body, []byte(magic)) {
		return Key{}, "", ErrNotCheckerPayload
	}
	parts := strings.SplitN(string(body[len(magic):min(len(body), len(magic)+512)]), "|", 4)
	if len(parts) < 4 {
		return Key{}, "", fmt.Errorf("%w: truncated header", ErrNotCheckerPayload)
	}
	seq, err1 := strconv.ParseInt(parts[1], 10, 64)
	size, err2 := strconv.Atoi(parts[2])
	if err1 != nil || err2 != nil || size < 0 {
		return Key{}, "", fmt.Errorf("%w: bad header", ErrNotCheckerPayload)
	}
	key = Key{Producer: parts[0], Seq: seq}
	want := Payload(key.Producer, seq, size)
	if !bytes.Equal(body, want) {
		corrupt = fmt.Sprintf("body differs from what %s sent (got %d bytes, want %d)", key, len(body), len(want))
	}
	return key, corrupt, nil
}

// Sent records that producer is about to send seq with a body of size bytes (state Pending).
func (c *Checker) Sent(producer string, seq int64, size int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sends[Key{producer, seq}] = &sendRecord{state: Pending, size: size}
}

// Acked records the broker's receipt for a send, with the message id it returned.
func (c *Checker) Acked(producer string, seq int64, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.record(Key{producer, seq})
	r.state = Acked
	r.id = id
}

// Failed records that the client reported an error for a send.
func (c *Checker) Failed(producer string, seq int64, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.record(Key{producer, seq})
	if r.state != Acked { // a late error after a receipt does not undo the receipt
		r.state = Failed
	}
	if err != nil {
		r.err = err.Error()
	}
}

func (c *Checker) record(k Key) *sendRecord {
	r, ok := c.sends[k]
	if !ok {
		r = &sendRecord{}
		c.sends[k] = r
	}
	return r
}

// Received records that stream received body with message id id. Bodies that are not checker
// payloads are kept and reported by Verify as unexpected.
func (c *Checker) Received(stream string, body []byte, id string) {
	key, corrupt, err := Parse(body)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		s := string(body)
		if len(s) > 64 {
			s = s[:64] + "..."
		}
		c.foreign[stream] = append(c.foreign[stream], s)
		return
	}
	c.deliveries[stream] = append(c.deliveries[stream], Delivery{Key: key, ID: id, Corrupt: corrupt})
}

// Counts returns how many sends are acked, failed and pending.
func (c *Checker) Counts() (acked, failed, pending int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.sends {
		switch r.state {
		case Acked:
			acked++
		case Failed:
			failed++
		default:
			pending++
		}
	}
	return
}

// ReceivedCount returns how many deliveries stream has seen (duplicates included).
func (c *Checker) ReceivedCount(stream string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.deliveries[stream]) + len(c.foreign[stream])
}

// DistinctReceived returns how many distinct acked sends that Expect selects stream has seen.
func (c *Checker) DistinctReceived(stream string, exp Expect) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := make(map[Key]bool)
	for _, d := range c.deliveries[stream] {
		if r, ok := c.sends[d.Key]; ok && r.state == Acked && exp.wants(d.Key.Producer) {
			seen[d.Key] = true
		}
	}
	return len(seen)
}

// Expect says what Verify expects a stream to have received.
type Expect struct {
	// Producers selects whose messages the stream must see; nil means every producer. Messages of
	// other producers are reported as unexpected.
	Producers func(producer string) bool
	// AllowDuplicates accepts a message delivered more than once (at-least-once consumption with
	// redelivery, such as nacks or a Shared subscription after a consumer leaves).
	AllowDuplicates bool
	// NoOrder skips the order check (Shared subscriptions, several partitions of one producer...).
	NoOrder bool
	// Partial accepts that acked sends are missing (the stream started late, e.g. a latest reader);
	// Verify then checks only that what arrived is a contiguous, ordered, duplicate-free suffix.
	Partial bool
}

func (e Expect) wants(producer string) bool { return e.Producers == nil || e.Producers(producer) }

// Report is the result of Verify. Problems is empty when the stream kept every promise.
type Report struct {
	Stream    string
	Expected  int // acked sends the stream had to receive
	Received  int // deliveries (with duplicates)
	Distinct  int // distinct messages received
	Uncertain int // failed or pending sends that arrived (allowed, at most once)
	Problems  []string
}

// OK reports whether no problem was found.
func (r Report) OK() bool { return len(r.Problems) == 0 }

func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "stream %q: expected %d, received %d (%d distinct, %d uncertain)", r.Stream, r.Expected, r.Received, r.Distinct, r.Uncertain)
	if r.OK() {
		b.WriteString(": OK")
		return b.String()
	}
	fmt.Fprintf(&b, ": %d problem(s):", len(r.Problems))
	for _, p := range r.Problems {
		b.WriteString("\n  - ")
		b.WriteString(p)
	}
	return b.String()
}

// maxListed bounds how many keys one problem line lists.
const maxListed = 20

// Verify checks stream against every recorded send:
//   - no loss: every acked send selected by exp was received (unless exp.Partial);
//   - no duplicates: nothing received twice (unless exp.AllowDuplicates);
//   - order: per producer, sequence numbers arrive increasing (unless exp.NoOrder);
//   - integrity: every body is exactly what its producer sent;
//   - nothing unexpected: every delivery belongs to a recorded send of a selected producer.
func (c *Checker) Verify(stream string, exp Expect) Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	rep := Report{Stream: stream, Received: len(c.deliveries[stream]) + len(c.foreign[stream])}
	if f := c.foreign[stream]; len(f) > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d message(s) that no checker producer sent, first %q", len(f), f[0]))
	}
	count := make(map[Key]int)
	var unknown, unwanted, corrupt, dups []string
	lastSeq := make(map[string]int64)
	firstSeq := make(map[string]int64)
	var disorder []string
	for _, d := range c.deliveries[stream] {
		count[d.Key]++
		if d.Corrupt != "" {
			corrupt = append(corrupt, d.Key.String()+" at "+d.ID+": "+d.Corrupt)
		}
		r, known := c.sends[d.Key]
		switch {
		case !known:
			unknown = append(unknown, d.Key.String())
			continue
		case !exp.wants(d.Key.Producer):
			unwanted = append(unwanted, d.Key.String())
			continue
		}
		if count[d.Key] == 2 && !exp.AllowDuplicates {
			dups = append(dups, fmt.Sprintf("%s (ids: %s)", d.Key, c.idsOf(stream, d.Key)))
		}
		if count[d.Key] == 1 && r.state != Acked {
			rep.Uncertain++
		}
		p := d.Key.Producer
		if !exp.NoOrder && count[d.Key] == 1 {
			last, ok := lastSeq[p]
			if ok && d.Key.Seq < last {
				disorder = append(disorder, fmt.Sprintf("%s after %s#%d", d.Key, p, last))
			}
			if !ok || d.Key.Seq > last {
				lastSeq[p] = d.Key.Seq
			}
		}
		if first, ok := firstSeq[p]; !ok || d.Key.Seq < first {
			firstSeq[p] = d.Key.Seq
		}
	}
	rep.Distinct = len(count)

	var missing []Key
	for k, r := range c.sends {
		if r.state != Acked || !exp.wants(k.Producer) {
			continue
		}
		if exp.Partial {
			// Only sends from the lowest one this stream saw from the producer on must be present.
			first, ok := firstSeq[k.Producer]
			if !ok || k.Seq < first {
				continue
			}
		}
		rep.Expected++
		if count[k] == 0 {
			missing = append(missing, k)
		}
	}
	sort.Slice(missing, func(i, j int) bool {
		if missing[i].Producer != missing[j].Producer {
			return missing[i].Producer < missing[j].Producer
		}
		return missing[i].Seq < missing[j].Seq
	})
	if len(missing) > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("LOSS: %d acked message(s) never received: %s", len(missing), summarizeKeys(missing)))
	}
	add := func(what string, list []string) {
		if len(list) == 0 {
			return
		}
		shown := list
		if len(shown) > maxListed {
			shown = shown[:maxListed]
		}
		more := ""
		if len(list) > len(shown) {
			more = fmt.Sprintf(" ... and %d more", len(list)-len(shown))
		}
		rep.Problems = append(rep.Problems, fmt.Sprintf("%s: %d: %s%s", what, len(list), strings.Join(shown, ", "), more))
	}
	add("DUPLICATE", dups)
	add("ORDER", disorder)
	add("CORRUPT", corrupt)
	add("UNKNOWN (never sent)", unknown)
	add("UNEXPECTED producer", unwanted)
	return rep
}

func (c *Checker) idsOf(stream string, k Key) string {
	var ids []string
	for _, d := range c.deliveries[stream] {
		if d.Key == k {
			ids = append(ids, d.ID)
		}
	}
	return strings.Join(ids, " ")
}

// summarizeKeys prints sorted keys as producer ranges: "p1#3-7, p1#9, p2#0-99".
func summarizeKeys(keys []Key) string {
	var parts []string
	for i := 0; i < len(keys); {
		j := i
		for j+1 < len(keys) && keys[j+1].Producer == keys[i].Producer && keys[j+1].Seq == keys[j].Seq+1 {
			j++
		}
		if i == j {
			parts = append(parts, keys[i].String())
		} else {
			parts = append(parts, fmt.Sprintf("%s#%d-%d", keys[i].Producer, keys[i].Seq, keys[j].Seq))
		}
		i = j + 1
		if len(parts) == maxListed && i < len(keys) {
			parts = append(parts, fmt.Sprintf("... and %d more", len(keys)-i))
			break
		}
	}
	return strings.Join(parts, ", ")
}
