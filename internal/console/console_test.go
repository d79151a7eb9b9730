package console

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meridian-mq/meridian/internal/poll"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestHistoryKeepsActiveOutboundLinksOnly: at most MaxSamples per outbound link; inbound links keep
// none; a link no longer reported loses its history.
func TestHistoryKeepsActiveOutboundLinksOnly(t *testing.T) {
	h := history{series: map[linkKey][]Sample{}}
	t0 := time.Unix(1000, 0)
	out := LinkState{Topic: "t", Remote: "b", Outbound: true, Connected: true}
	in := LinkState{Topic: "t", Remote: "c"}
	for i := range MaxSamples + 20 {
		out.Backlog = int64(i)
		h.record(t0.Add(time.Duration(i)*time.Second), []LinkState{out, in})
	}
	s := h.of("t", "b")
	if len(s) != MaxSamples || s[0].Backlog != 20 || s[len(s)-1].Backlog != MaxSamples+19 {
		t.Fatalf("history: %d samples from %d to %d", len(s), s[0].Backlog, s[len(s)-1].Backlog)
	}
	if len(h.of("t", "c")) != 0 {
		t.Fatal("an inbound link has history")
	}
	h.record(t0.Add(time.Hour), []LinkState{in})
	if len(h.series) != 0 {
		t.Fatalf("a stopped replicator keeps history: %v", h.series)
	}
}

// TestAssess: the state and the catch-up time of a link from its values and history.
func TestAssess(t *testing.T) {
	t0 := time.Unix(1000, 0).UnixMilli()
	hist := func(backlogs ...int64) []Sample {
		var s []Sample
		for i, b := range backlogs {
			s = append(s, Sample{At: t0 + int64(i)*5000, Backlog: b, Connected: true})
		}
		return s
	}
	cases := []struct {
		name  string
		link  LinkState
		hist  []Sample
		state string
		eta   float64 // 0: none
	}{
		{"caught up", LinkState{Outbound: true, Connected: true}, hist(0, 0), "ok", 0},
		{"draining", LinkState{Outbound: true, Connected: true, Backlog: 500, RateOut: 100}, hist(1500, 1000, 500), "behind", 5},
		{"no history yet", LinkState{Outbound: true, Connected: true, Backlog: 500, RateOut: 100}, nil, "behind", 0},
		{"stuck", LinkState{Outbound: true, Connected: true, Backlog: 500}, hist(500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500), "not-draining", 0},
		{"disconnected", LinkState{Outbound: true, Backlog: 7, LastError: "connection refused"}, hist(3, 5, 7), "disconnected", 0},
		{"remote refuses", LinkState{Outbound: true, Connected: true, Backlog: 7, LastError: "NotAllowed"}, hist(7, 7), "error", 0},
		{"stalled", LinkState{Outbound: true, Connected: true, Backlog: 7, LastError: "NotAllowed", Stalled: true}, hist(7, 7), "stalled", 0},
		{"inbound", LinkState{RateIn: 30}, nil, "inbound", 0},
	}
	for _, c := range cases {
		got := assess(c.link, c.hist)
		if got.State != c.state {
			t.Errorf("%s: state %q, want %q", c.name, got.State, c.state)
		}
		switch {
		case c.eta == 0 && got.ETASeconds != nil:
			t.Errorf("%s: eta %v, want none", c.name, *got.ETASeconds)
		case c.eta != 0 && (got.ETASeconds == nil || *got.ETASeconds != c.eta):
			t.Errorf("%s: eta %v, want %v", c.name, got.ETASeconds, c.eta)
		}
	}
}

type fakeSource struct {
	mu    sync.Mutex
	links []LinkState
}

func (f *fakeSource) LocalCluster() string { return "a" }
func (f *fakeSource) Clusters() []Cluster {
	return []Cluster{{Name: "a", Local: true}, {Name: "b"}}
}
func (f *fakeSource) Subscriptions() []SubscriptionSync {
	return []SubscriptionSync{{Topic: "persistent://public/default/x", Subscription: "app", Remote: "b", Outbound: true, LagMs: 12}}
}
func (f *fakeSource) Links() []LinkState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]LinkState(nil), f.links...)
}

// TestHandler: the page and its assets are served from the binary, the overview as JSON with the
// sampler's history.
func TestHandler(t *testing.T) {
	src := &fakeSource{links: []LinkState{{Topic: "persistent://public/default/x", Remote: "b", Outbound: true, Connected: true, Backlog: 3}}}
	c := New(src, 10*time.Millisecond, 0, nil)
	c.Start()
	defer c.Close()
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	for _, p := range []string{"/console/", "/console/console.js", "/console/console.css"} {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || len(body) == 0 {
			t.Fatalf("GET %s: %d, %d bytes", p, resp.StatusCode, len(body))
		}
		if p == "/console/" && !strings.Contains(string(body), "replication console") {
			t.Fatalf("GET %s: not the page", p)
		}
	}
	poll.UntilNil(t, 5*time.Second, "three history samples", func() error {
		resp, err := http.Get(srv.URL + "/console/api/overview")
		if err != nil {
			t.Fatal(err)
		}
		var ov Overview
		err = json.NewDecoder(resp.Body).Decode(&ov)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if ov.Cluster != "a" || len(ov.Clusters) != 2 || len(ov.Links) != 1 || len(ov.Subscriptions) != 1 || ov.Subscriptions[0].LagMs != 12 {
			t.Fatalf("overview %+v", ov)
		}
		if len(ov.Links[0].History) < 3 {
			return fmt.Errorf("history %+v", ov.Links[0].History)
		}
		return nil
	})
}

// TestHistoryBudget: links beyond the history's byte budget get no history (counted); a link that
// stops frees its room for another.
func TestHistoryBudget(t *testing.T) {
	h := history{series: map[linkKey][]Sample{}, budget: 2 * MaxSamples * SampleBytes}
	link := func(topic string) LinkState { return LinkState{Topic: topic, Remote: "b", Outbound: true} }
	h.record(time.Unix(1, 0), []LinkState{link("t1"), link("t2"), link("t3")})
	if reserved, budget, refused := h.usage(); len(h.series) != 2 || refused != 1 || reserved != budget {
		t.Fatalf("3 links in a budget of 2: %d series, reserved %d of %d, refused %d", len(h.series), reserved, budget, refused)
	}
	h.record(time.Unix(2, 0), []LinkState{link("t2"), link("t3")})
	if _, ok := h.series[linkKey{"t3", "b"}]; !ok || len(h.series) != 2 {
		t.Fatalf("after t1 stopped, t3 has no history: %v", h.series)
	}
	if _, _, refused := h.usage(); refused != 0 {
		t.Fatalf("refused %d", refused)
	}
}
