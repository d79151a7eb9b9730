package replication

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/transcript"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// TestMachineTranscripts replays testdata/machine/*.txt: each file specifies the replicator's
// Machine (machine.go) as the events it is given and the actions it answers with. The local
// cluster is a, the remote b. The commands and what they print:
//
//	machine [max-inflight=N] [read-batch=N] [read-batch-bytes=N] [rate=N] [receipt-timeout=D]
//	                                a new machine (defaults as in MachineConfig; rate in messages/s)
//	start markdelete=L:E            EvStart: the replication cursor is open
//	connected gen=N                 EvConnected
//	connect-failed gen=N            EvConnectFailed (the error: "refused")
//	read-done epoch=N [ENTRY...]    EvReadDone with the entries read (none: the end of the log)
//	read-failed epoch=N             EvReadDone with an error ("io error")
//	receipt gen=N L:E               EvReceipt: the remote stored the entry from L:E
//	receipts gen=N L:E...           EvReceipts: several receipts that arrived together
//	send-failed gen=N               EvSendFailed ("connection reset")
//	mark-delete-done L:E            EvMarkDeleteDone
//	mark-delete-failed L:E          EvMarkDeleteDone with an error ("disk full")
//	data-available                  EvDataAvailable
//	timer KIND                      EvTimer (reconnect, read, rate, mark-delete)
//	tick                            EvTick: time passes (the receipt timeout is checked)
//	set-rate N                      EvSetRate: N messages a second (0: unlimited)
//	stop                            EvStop
//	wait D                          the clock moves on by D (no event)
//	state                           phase, window, positions, counters and the last error
//
// An ENTRY is a position or a range L:E..L:E, with attributes after slashes: /from=C (replicated
// from cluster C), /local-only, /to=C+C (replicate_to), /marker=N (a broker marker of type N),
// /corrupt (checksum mismatch), /bytes=N (payload size). Actions print one a line: "connect gen=N",
// "close producer gen=N", "read epoch=N from L:E (N entries, N bytes)", "send gen=N: L:E ...",
// "mark-delete L:E", "wait for data from L:E", "timer KIND in D".
func TestMachineTranscripts(t *testing.T) {
	transcript.RunDir(t, "testdata/machine", func(t *testing.T) transcript.Driver {
		return (&machineDriver{now: t0}).do
	})
}

type machineDriver struct {
	m   *Machine
	now time.Time
}

func (md *machineDriver) do(t *testing.T, c transcript.Command) string {
	t.Helper()
	if c.Name == "machine" {
		md.newMachine(t, c)
		return ""
	}
	if md.m == nil {
		t.Fatalf("%s: the first command is machine", c.Pos)
	}
	var ev Event
	switch c.Name {
	case "start":
		ev = EvStart{Now: md.now, MarkDelete: md.pos(t, c, md.value(t, c, "markdelete"))}
	case "connected":
		ev = EvConnected{Now: md.now, Gen: md.int(t, c, "gen")}
	case "connect-failed":
		ev = EvConnectFailed{Now: md.now, Gen: md.int(t, c, "gen"), Err: errors.New("refused")}
	case "read-done":
		var es []mtypes.Entry
		for _, w := range c.Args {
			if !strings.HasPrefix(w, "epoch=") {
				es = append(es, md.entries(t, c, w)...)
			}
		}
		ev = EvReadDone{Now: md.now, Epoch: md.int(t, c, "epoch"), Entries: es}
	case "read-failed":
		ev = EvReadDone{Now: md.now, Epoch: md.int(t, c, "epoch"), Err: errors.New("io error")}
	case "receipt":
		ev = EvReceipt{Now: md.now, Gen: md.int(t, c, "gen"), Source: md.pos(t, c, md.plain(t, c)[0])}
	case "receipts":
		var ps []mtypes.Position
		for _, w := range md.plain(t, c) {
			ps = append(ps, md.pos(t, c, w))
		}
		ev = EvReceipts{Now: md.now, Gen: md.int(t, c, "gen"), Sources: ps}
	case "send-failed":
		ev = EvSendFailed{Now: md.now, Gen: md.int(t, c, "gen"), Err: errors.New("connection reset")}
	case "mark-delete-done":
		ev = EvMarkDeleteDone{Now: md.now, Pos: md.pos(t, c, md.plain(t, c)[0])}
	case "mark-delete-failed":
		ev = EvMarkDeleteDone{Now: md.now, Pos: md.pos(t, c, md.plain(t, c)[0]), Err: errors.New("disk full")}
	case "data-available":
		ev = EvDataAvailable{Now: md.now}
	case "timer":
		kinds := map[string]TimerKind{"reconnect": TimerReconnect, "read": TimerRead, "rate": TimerRate, "mark-delete": TimerMarkDelete}
		k, ok := kinds[md.plain(t, c)[0]]
		if !ok {
			t.Fatalf("%s: timer kind %q", c.Pos, md.plain(t, c)[0])
		}
		ev = EvTimer{Now: md.now, Kind: k}
	case "tick":
		ev = EvTick{Now: md.now}
	case "set-rate":
		n, err := strconv.ParseFloat(md.plain(t, c)[0], 64)
		if err != nil {
			t.Fatalf("%s: %v", c.Pos, err)
		}
		ev = EvSetRate{Now: md.now, Rate: Rate{MessagesPerSecond: n}}
	case "stop":
		ev = EvStop{Now: md.now}
	case "wait":
		d, err := time.ParseDuration(md.plain(t, c)[0])
		if err != nil {
			t.Fatalf("%s: %v", c.Pos, err)
		}
		md.now = md.now.Add(d)
		return ""
	case "state":
		return md.state()
	default:
		t.Fatalf("%s: unknown command %q", c.Pos, c.Name)
	}
	return describeActions(md.m.Handle(ev))
}

func (md *machineDriver) newMachine(t *testing.T, c transcript.Command) {
	cfg := cfgAB()
	if v, ok := c.Value("max-inflight"); ok {
		cfg.MaxInflightEntries = md.atoi(t, c, v)
	}
	if v, ok := c.Value("read-batch"); ok {
		cfg.ReadBatchEntries = md.atoi(t, c, v)
	}
	if v, ok := c.Value("read-batch-bytes"); ok {
		cfg.ReadBatchBytes = int64(md.atoi(t, c, v))
	}
	if v, ok := c.Value("rate"); ok {
		cfg.Rate = Rate{MessagesPerSecond: float64(md.atoi(t, c, v))}
	}
	if v, ok := c.Value("receipt-timeout"); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s: %v", c.Pos, err)
		}
		cfg.ReceiptTimeout = d
	}
	md.m = NewMachine(cfg)
}

func describeActions(acts []Action) string {
	var lines []string
	for _, a := range acts {
		switch a := a.(type) {
		case ActConnect:
			lines = append(lines, fmt.Sprintf("connect gen=%d", a.Gen))
		case ActCloseProducer:
			lines = append(lines, fmt.Sprintf("close producer gen=%d", a.Gen))
		case ActRead:
			lines = append(lines, fmt.Sprintf("read epoch=%d from %s (%d entries, %d bytes)", a.Epoch, a.From, a.MaxEntries, a.MaxBytes))
		case ActSend:
			lines = append(lines, fmt.Sprintf("send gen=%d: %s", a.Gen, a.Out.Source))
		case ActSends:
			srcs := make([]string, len(a.Outs))
			for i, o := range a.Outs {
				srcs[i] = o.Source.String()
			}
			lines = append(lines, fmt.Sprintf("send gen=%d: %s", a.Gen, strings.Join(srcs, " ")))
		case ActMarkDelete:
			lines = append(lines, fmt.Sprintf("mark-delete %s", a.Pos))
		case ActWaitForData:
			lines = append(lines, fmt.Sprintf("wait for data from %s", a.From))
		case ActSetTimer:
			names := map[TimerKind]string{TimerReconnect: "reconnect", TimerRead: "read", TimerRate: "rate", TimerMarkDelete: "mark-delete"}
			lines = append(lines, fmt.Sprintf("timer %s in %v", names[a.Kind], a.Delay))
		default:
			lines = append(lines, fmt.Sprintf("%#v", a))
		}
	}
	return strings.Join(lines, "\n")
}

func (md *machineDriver) state() string {
	c := md.m.Counters()
	lines := []string{fmt.Sprintf("%s, %d in flight, read from %s, mark-delete at %s", md.m.Phase(), c.Inflight, c.ReadPosition, c.MarkDelete)}
	out := fmt.Sprintf("messages sent %d, reconnects %d", c.MsgOut, c.Reconnects)
	if len(c.Skipped) > 0 {
		var skips []string
		for _, r := range slices.Sorted(maps.Keys(c.Skipped)) {
			skips = append(skips, fmt.Sprintf("%s %d", r, c.Skipped[r]))
		}
		out += ", skipped " + strings.Join(skips, ", ")
	}
	if c.RateLimited {
		out += ", rate limited"
	}
	lines = append(lines, out)
	if c.LastError != "" {
		lines = append(lines, "last error: "+c.LastError)
	}
	return strings.Join(lines, "\n")
}

// entries reads one ENTRY word: a position or range with /attributes.
func (md *machineDriver) entries(t *testing.T, c transcript.Command, w string) []mtypes.Entry {
	ledger, ids, attrs, err := transcript.Entries(w)
	if err != nil {
		t.Fatalf("%s: %v", c.Pos, err)
	}
	var tweaks []func(*pulsarpb.MessageMetadata)
	payload, corrupt := "", false
	for _, a := range attrs {
		switch v := a.Value; a.Key {
		case "from":
			tweaks = append(tweaks, func(m *pulsarpb.MessageMetadata) { m.ReplicatedFrom = proto.String(v) })
		case "local-only":
			tweaks = append(tweaks, func(m *pulsarpb.MessageMetadata) { m.ReplicateTo = []string{LocalOnly} })
		case "to":
			tweaks = append(tweaks, func(m *pulsarpb.MessageMetadata) { m.ReplicateTo = strings.Split(v, "+") })
		case "marker":
			n := md.atoi(t, c, v)
			tweaks = append(tweaks, func(m *pulsarpb.MessageMetadata) { m.MarkerType = proto.Int32(int32(n)) })
		case "corrupt":
			corrupt = true
		case "bytes":
			payload = strings.Repeat("x", md.atoi(t, c, v))
		default:
			t.Fatalf("%s: entry attribute %q", c.Pos, a.Key)
		}
	}
	var out []mtypes.Entry
	for _, e := range ids {
		p := mtypes.Position{LedgerID: ledger, EntryID: e}
		body := payload
		if body == "" {
			body = p.String()
		}
		en := mkEntry(t, p, body, func(m *pulsarpb.MessageMetadata) {
			for _, tw := range tweaks {
				tw(m)
			}
		})
		if corrupt {
			en.Data = slices.Clone(en.Data)
			en.Data[len(en.Data)-1] ^= 0xff // checksum mismatch
		}
		out = append(out, en)
	}
	return out
}

func (md *machineDriver) pos(t *testing.T, c transcript.Command, s string) mtypes.Position {
	t.Helper()
	l, e, err := transcript.Position(s)
	if err != nil {
		t.Fatalf("%s: %v", c.Pos, err)
	}
	return mtypes.Position{LedgerID: l, EntryID: e}
}

func (md *machineDriver) plain(t *testing.T, c transcript.Command) []string {
	t.Helper()
	p := c.Plain()
	if len(p) == 0 {
		t.Fatalf("%s: %s needs an argument", c.Pos, c.Name)
	}
	return p
}

func (md *machineDriver) value(t *testing.T, c transcript.Command, key string) string {
	t.Helper()
	v, ok := c.Value(key)
	if !ok {
		t.Fatalf("%s: %s needs %s=", c.Pos, c.Name, key)
	}
	return v
}

func (md *machineDriver) int(t *testing.T, c transcript.Command, key string) int64 {
	t.Helper()
	return int64(md.atoi(t, c, md.value(t, c, key)))
}

func (md *machineDriver) atoi(t *testing.T, c transcript.Command, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s: %q: %v", c.Pos, s, err)
	}
	return n
}
