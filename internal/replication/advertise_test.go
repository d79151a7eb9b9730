package replication

import (
	"testing"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/mtypes"
)

// TestAdvertiserSendsMovedTopicsOnly: a topic is advertised to a remote when its last position
// moved since that remote last received it; idle topics cost nothing; a failed delivery is sent
// again; stopped replicators are forgotten.
func TestAdvertiserSendsMovedTopicsOnly(t *testing.T) {
	a := advertiser{sent: map[Key]mtypes.Position{}}
	now := time.Unix(100, 0)
	t1b, t2b, t1c := Key{"t1", "b"}, Key{"t2", "b"}, Key{"t1", "c"}
	backlogOf := func(n int64) func() (int64, int64) { return func() (int64, int64) { return n, 0 } }
	views := []replicatorView{{key: t1b, last: mtypes.Position{LedgerID: 5, EntryID: 3}, stats: backlogOf(2)}, {key: t2b, last: mtypes.Position{LedgerID: 6, EntryID: 0}, stats: backlogOf(0)}, {key: t1c, last: mtypes.Position{LedgerID: 5, EntryID: 3}, stats: backlogOf(0)}}
	due := a.due("a", now, views)
	if len(due) != 2 || len(due["b"].Topics) != 2 || due["b"].Topics["t1"].LastPosition != "5:3" || due["b"].Topics["t1"].Backlog != 2 || due["b"].Source != "a" {
		t.Fatalf("first round: %+v", due)
	}
	a.delivered("b", due["b"]) // c's delivery failed
	due = a.due("a", now.Add(time.Second), views)
	if len(due) != 1 || len(due["c"].Topics) != 1 {
		t.Fatalf("second round (nothing moved, c not delivered): %+v", due)
	}
	a.delivered("c", due["c"])
	views[1].last = mtypes.Position{LedgerID: 6, EntryID: 9}
	due = a.due("a", now.Add(2*time.Second), views[:2])
	if len(due) != 1 || len(due["b"].Topics) != 1 || due["b"].Topics["t2"].LastPosition != "6:9" {
		t.Fatalf("third round (t2 moved): %+v", due)
	}
	if _, ok := a.sent[t1c]; ok {
		t.Fatal("a stopped replicator is still remembered")
	}
}

// TestMissingFromAdvertisements: the target compares what a source advertised with what of the
// source arrived (its inbound index).
func TestMissingFromAdvertisements(t *testing.T) {
	m := &Manager{opts: ManagerOptions{Local: "b"}, indexes: map[string]*Index{}}
	x := NewIndex(IndexOptions{})
	topic := "persistent://public/default/t"
	m.indexes[topic] = x
	for e := int64(0); e < 5; e++ {
		_, _, _, commit, err := x.Admit(replicated(t, "a", mtypes.Position{LedgerID: 7, EntryID: e}, "m"))
		if err != nil {
			t.Fatal(err)
		}
		commit(20, e, nil)
	}
	if err := m.ReceiveAdvertisement(adminapi.ReplicationAdvertisement{Source: "a", Timestamp: 1, Topics: map[string]adminapi.AdvertisedTopic{
		topic:                           {LastPosition: "7:9", Backlog: 5},
		"persistent://public/default/u": {LastPosition: "3:1", Backlog: 2},
		"persistent://other/default/t":  {LastPosition: "3:1", Backlog: 2},
	}}); err != nil {
		t.Fatal(err)
	}
	if err := m.ReceiveAdvertisement(adminapi.ReplicationAdvertisement{Source: "b"}); err == nil {
		t.Fatal("an advertisement from this cluster itself accepted")
	}
	if err := m.ReceiveAdvertisement(adminapi.ReplicationAdvertisement{Source: "a", Topics: map[string]adminapi.AdvertisedTopic{topic: {LastPosition: "x"}}}); err == nil {
		t.Fatal("a bad position accepted")
	}
	states := m.SourceStates("public/default")
	if len(states) != 2 {
		t.Fatalf("states: %+v", states)
	}
	for _, st := range states {
		switch st.Topic {
		case topic:
			if st.ArrivedThrough != "7:4" || st.Missing != 5 || !st.MissingExact {
				t.Errorf("t: %+v, want arrived through 7:4 and 5 missing (7:5..7:9)", st)
			}
		default:
			if st.Missing != 2 || st.MissingExact || st.ArrivedThrough != "" {
				t.Errorf("u (no index loaded): %+v, want the advertised backlog", st)
			}
		}
	}
}
