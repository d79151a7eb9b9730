package broker

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/transcript"
)

// TestDispatchTranscripts replays testdata/dispatch/*.txt: each file is a specification of the
// dispatch state machine (dispatch.go) as the commands a subscription gives it and the decisions it
// answers with. The commands (one a line) and what they print:
//
//	sub TYPE [partition=N] [read=L:E] [max-unacked=N] [max-unacked-sub=N]
//	                                  a new subscription (exclusive, shared, failover, key_shared)
//	add NAME [priority=N] [sticky=S-E,...] [markdelete=L:E]
//	                                  a consumer joins: ACTIVE_CONSUMER_CHANGEs; Key_Shared: its join point
//	remove NAME [markdelete=L:E]      a consumer leaves: ACTIVE_CONSUMER_CHANGEs
//	flow NAME N                       N permits
//	plan last=L:E [max=N] [caught-up] [replay-stalled]
//	                                  the next read: "read L:E.. max N", "replay L:E ...", "nothing to read"
//	read ENTRY... [now=MS]            the entries the last plan read come back: who gets what
//	redeliver NAME [L:E...]           the consumer's pending entries (all, or those) go back for redelivery
//	ack L:E...                        individual acknowledgements
//	ack-upto L:E                      a cumulative acknowledgement (the cursor's mark-delete moves there)
//	partial-ack L:E left=N            a batch-index acknowledgement leaves N messages of the entry
//	rewind markdelete=L:E             Exclusive/Failover redelivery: read again after the mark-delete
//	seek L:E                          the subscription moves (pending, replay and delays dropped)
//	release now=MS                    delayed entries due by now go to the replay set
//	state                             the read position, replay set, delays and each consumer
//
// An ENTRY is a position or a range L:E..L:E, with attributes after slashes: /msgs=N (messages in the
// batch), /marker, /acked (acknowledged since it was read), /acked-bits=B (batch indexes acknowledged,
// index 0 rightmost), /key=H (Key_Shared hash), /deliver-at=MS, /chunk=UUID, /last (last chunk).
// A delivery prints as "NAME <- L:E ...", an entry with "(redelivery N)" or "(M of N messages, ackset
// B)" where that applies.
func TestDispatchTranscripts(t *testing.T) {
	transcript.RunDir(t, "testdata/dispatch", func(t *testing.T) transcript.Driver {
		return (&dispatchDriver{}).do
	})
}

type dispatchDriver struct {
	d      *dispatchState
	byName map[string]*dconsumer
	seq    uint64
	plan   readPlan
	acked  map[mtypes.Position]bool // acknowledged since read (/acked)
}

func (dr *dispatchDriver) do(t *testing.T, c transcript.Command) string {
	t.Helper()
	if c.Name != "sub" && dr.d == nil {
		t.Fatalf("%s: the first command is sub", c.Pos)
	}
	switch c.Name {
	case "sub":
		return dr.sub(t, c)
	case "add":
		return dr.add(t, c)
	case "remove":
		cons := dr.consumer(t, c, 0)
		return describeChanges(dr.d.removeConsumer(cons, dr.markDeleteArg(t, c)))
	case "flow":
		n, err := strconv.ParseUint(dr.arg(t, c, 1), 10, 32)
		if err != nil {
			t.Fatalf("%s: %v", c.Pos, err)
		}
		dr.d.flow(dr.consumer(t, c, 0), uint32(n))
		return ""
	case "plan":
		return dr.planRead(t, c)
	case "read":
		return dr.read(t, c)
	case "redeliver":
		var ps []mtypes.Position
		for _, w := range c.Args[1:] {
			ps = append(ps, parsePos(t, c, w))
		}
		dr.d.redeliverPending(dr.consumer(t, c, 0), ps)
		return ""
	case "ack":
		for _, w := range c.Args {
			dr.d.acked(parsePos(t, c, w))
		}
		return ""
	case "ack-upto":
		p := parsePos(t, c, dr.arg(t, c, 0))
		dr.d.ackedUpTo(p)
		dr.d.markDelete = p
		return ""
	case "partial-ack":
		dr.d.partiallyAcked(parsePos(t, c, dr.arg(t, c, 0)), dr.intValue(t, c, "left", 0))
		return ""
	case "rewind":
		dr.d.rewind(dr.markDeleteArg(t, c))
		return ""
	case "seek":
		dr.d.reset(parsePos(t, c, dr.arg(t, c, 0)))
		return ""
	case "release":
		if due := dr.d.releaseDelayed(int64(dr.intValue(t, c, "now", 0))); due != 0 {
			return fmt.Sprintf("next due at %d", due)
		}
		return "no entry delayed"
	case "state":
		return dr.state()
	}
	t.Fatalf("%s: unknown command %q", c.Pos, c.Name)
	return ""
}

func (dr *dispatchDriver) sub(t *testing.T, c transcript.Command) string {
	types := map[string]mtypes.SubType{"exclusive": mtypes.SubExclusive, "shared": mtypes.SubShared, "failover": mtypes.SubFailover, "key_shared": mtypes.SubKeyShared}
	st, ok := types[dr.arg(t, c, 0)]
	if !ok {
		t.Fatalf("%s: subscription type %q", c.Pos, dr.arg(t, c, 0))
	}
	read := mtypes.Position{LedgerID: 1}
	if v, ok := c.Value("read"); ok {
		read = parsePos(t, c, v)
	}
	dr.d = newDispatchState(st, int32(dr.intValue(t, c, "partition", -1)), read)
	dr.byName, dr.seq, dr.plan, dr.acked = map[string]*dconsumer{}, 0, readPlan{}, nil
	dr.d.maxUnacked = int64(dr.intValue(t, c, "max-unacked", 0))
	dr.d.maxUnackedSub = int64(dr.intValue(t, c, "max-unacked-sub", 0))
	return ""
}

func (dr *dispatchDriver) add(t *testing.T, c transcript.Command) string {
	name := dr.arg(t, c, 0)
	if dr.byName[name] != nil {
		t.Fatalf("%s: %s is already a consumer", c.Pos, name)
	}
	dr.seq++
	cons := newDConsumer(dr.seq, name, int32(dr.intValue(t, c, "priority", 0)))
	if v, ok := c.Value("sticky"); ok {
		for _, r := range strings.Split(v, ",") {
			var hr HashRange
			if _, err := fmt.Sscanf(r, "%d-%d", &hr.Start, &hr.End); err != nil {
				t.Fatalf("%s: sticky range %q: %v", c.Pos, r, err)
			}
			cons.sticky = append(cons.sticky, hr)
		}
	}
	dr.byName[name] = cons
	out := describeChanges(dr.d.addConsumer(cons, dr.markDeleteArg(t, c)))
	if cons.joinedAt != nil {
		out += fmt.Sprintf("%s joined at %s: nothing from there on until everything before is acknowledged", name, *cons.joinedAt)
	}
	return out
}

func (dr *dispatchDriver) planRead(t *testing.T, c transcript.Command) string {
	last, ok := c.Value("last")
	if !ok {
		t.Fatalf("%s: plan needs last=L:E (the topic's last entry)", c.Pos)
	}
	p, ok := dr.d.plan(dr.intValue(t, c, "max", 100), parsePos(t, c, last), c.Flag("caught-up"), c.Flag("replay-stalled"))
	dr.plan = p
	switch {
	case !ok:
		return "nothing to read"
	case p.seq:
		return fmt.Sprintf("read %s.. max %d", p.from, p.max)
	default:
		return "replay " + joinPositions(p.replay)
	}
}

func (dr *dispatchDriver) read(t *testing.T, c transcript.Command) string {
	var es []entryInfo
	for _, w := range c.Args {
		if !strings.HasPrefix(w, "now=") {
			es = append(es, dr.parseEntries(t, c, w)...)
		}
	}
	res := dr.d.assign(dr.plan, es, func(p mtypes.Position) bool { return dr.acked[p] }, int64(dr.intValue(t, c, "now", 0)))
	var lines []string
	var order []*dconsumer
	got := map[*dconsumer][]string{}
	for _, dl := range res.deliveries {
		if got[dl.to] == nil {
			order = append(order, dl.to)
		}
		got[dl.to] = append(got[dl.to], describeDelivery(dl.d))
	}
	for _, cons := range order {
		lines = append(lines, fmt.Sprintf("%s <- %s", cons.name, strings.Join(got[cons], " ")))
	}
	if len(res.markers) > 0 {
		lines = append(lines, "markers acknowledged: "+joinPositions(res.markers))
	}
	if res.skipped > 0 {
		lines = append(lines, fmt.Sprintf("%d acknowledged since read: skipped", res.skipped))
	}
	if len(lines) == 0 {
		return "nothing delivered"
	}
	return strings.Join(lines, "\n")
}

func describeDelivery(d Delivery) string {
	s := d.Position.String()
	var notes []string
	if d.RedeliveryCount > 0 {
		notes = append(notes, fmt.Sprintf("redelivery %d", d.RedeliveryCount))
	}
	if d.AckSet != nil {
		var bits []string
		for _, w := range d.AckSet {
			bits = append(bits, strconv.FormatUint(uint64(w), 2))
		}
		notes = append(notes, fmt.Sprintf("%d messages to deliver, ackset %s", d.NumMessages, strings.Join(bits, ",")))
	}
	if len(notes) > 0 {
		s += "(" + strings.Join(notes, ", ") + ")"
	}
	return s
}

func describeChanges(changes []activeChange) string {
	var b strings.Builder
	for _, ch := range changes {
		state := "inactive"
		if ch.active {
			state = "active"
		}
		fmt.Fprintf(&b, "%s is told it is %s\n", ch.to.name, state)
	}
	return b.String()
}

func (dr *dispatchDriver) state() string {
	d := dr.d
	var lines []string
	head := "read from " + d.readPos.String()
	if len(d.replay) > 0 {
		head += ", replay " + joinPositions(d.replay)
	}
	if len(d.delayed) > 0 {
		var ds []string
		for _, p := range sortedPositions(d.delayed) {
			ds = append(ds, fmt.Sprintf("%s at %d", p, d.delayed[p]))
		}
		head += ", delayed " + strings.Join(ds, " ")
	}
	if d.subscriptionBlocked() {
		head += ", subscription blocked on unacked messages"
	}
	lines = append(lines, head)
	for _, c := range d.consumers {
		line := fmt.Sprintf("%s: permits %d, unacked %d", c.name, c.permits, c.unacked)
		if d.singleActive() && d.active == c {
			line += ", active"
		}
		if d.blocked(c) {
			line += ", blocked"
		}
		if len(c.pending) > 0 {
			var ps []string
			for _, p := range sortedPositions(c.pending) {
				s := p.String()
				switch left, total := c.pending[p].left, d.batchSize(p); {
				case left != total:
					s += fmt.Sprintf("(%d of %d messages)", left, total)
				case total > 1:
					s += fmt.Sprintf("(%d messages)", total)
				}
				ps = append(ps, s)
			}
			line += ", pending " + strings.Join(ps, " ")
		}
		lines = append(lines, line)
	}
	if len(d.chunkOwner) > 0 {
		var cs []string
		for _, uuid := range slices.Sorted(maps.Keys(d.chunkOwner)) {
			cs = append(cs, fmt.Sprintf("%s to %s", uuid, d.chunkOwner[uuid].to.name))
		}
		lines = append(lines, "chunked messages in flight: "+strings.Join(cs, ", "))
	}
	if len(d.redeliveries) > 0 {
		var rs []string
		for _, p := range sortedPositions(d.redeliveries) {
			rs = append(rs, fmt.Sprintf("%s x%d", p, d.redeliveries[p]))
		}
		lines = append(lines, "redelivered "+strings.Join(rs, " "))
	}
	return strings.Join(lines, "\n")
}

func sortedPositions[V any](m map[mtypes.Position]V) []mtypes.Position {
	ps := make([]mtypes.Position, 0, len(m))
	for p := range m {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, mtypes.Position.Compare)
	return ps
}

func joinPositions(ps []mtypes.Position) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, " ")
}

// parseEntries reads one ENTRY word: a position or range with /attributes.
func (dr *dispatchDriver) parseEntries(t *testing.T, c transcript.Command, w string) []entryInfo {
	ledger, ids, attrs, err := transcript.Entries(w)
	if err != nil {
		t.Fatalf("%s: %v", c.Pos, err)
	}
	var out []entryInfo
	for _, e := range ids {
		ei := entryInfo{pos: mtypes.Position{LedgerID: ledger, EntryID: e}, numMessages: 1}
		for _, a := range attrs {
			n, _ := strconv.ParseInt(a.Value, 10, 64)
			switch a.Key {
			case "msgs":
				ei.numMessages = int(n)
			case "marker":
				ei.marker = true
			case "acked":
				if dr.acked == nil {
					dr.acked = map[mtypes.Position]bool{}
				}
				dr.acked[ei.pos] = true
			case "acked-bits":
				bits, err := strconv.ParseUint(a.Value, 2, 64)
				if err != nil {
					t.Fatalf("%s: acked-bits %q", c.Pos, a.Value)
				}
				ei.acked = []uint64{bits}
			case "key":
				ei.keyHash = uint32(n)
			case "deliver-at":
				ei.deliverAt = n
			case "chunk":
				ei.chunkUUID = a.Value
			case "last":
				ei.lastChunk = true
			default:
				t.Fatalf("%s: entry attribute %q", c.Pos, a.Key)
			}
		}
		out = append(out, ei)
	}
	return out
}

func parsePos(t *testing.T, c transcript.Command, s string) mtypes.Position {
	t.Helper()
	l, e, err := transcript.Position(s)
	if err != nil {
		t.Fatalf("%s: %v", c.Pos, err)
	}
	return mtypes.Position{LedgerID: l, EntryID: e}
}

func (dr *dispatchDriver) arg(t *testing.T, c transcript.Command, i int) string {
	t.Helper()
	plain := c.Plain()
	if i >= len(plain) {
		t.Fatalf("%s: %s needs %d arguments", c.Pos, c.Name, i+1)
	}
	return plain[i]
}

func (dr *dispatchDriver) consumer(t *testing.T, c transcript.Command, i int) *dconsumer {
	t.Helper()
	cons := dr.byName[dr.arg(t, c, i)]
	if cons == nil {
		t.Fatalf("%s: no consumer %q", c.Pos, dr.arg(t, c, i))
	}
	return cons
}

func (dr *dispatchDriver) intValue(t *testing.T, c transcript.Command, key string, def int) int {
	t.Helper()
	v, ok := c.Value(key)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s: %s=%q: %v", c.Pos, key, v, err)
	}
	return n
}

func (dr *dispatchDriver) markDeleteArg(t *testing.T, c transcript.Command) mtypes.Position {
	t.Helper()
	if v, ok := c.Value("markdelete"); ok {
		return parsePos(t, c, v)
	}
	return mtypes.Position{LedgerID: 1, EntryID: -1}
}
