package replication

import (
	"reflect"
	"testing"

	"github.com/meridian-mq/meridian/adminapi"
)

func TestPlan(t *testing.T) {
	tests := []struct {
		name    string
		inputs  []TopicInput
		running map[Key]Rate
		want    PlanResult
	}{
		{
			name:   "new remotes start, local cluster ignored",
			inputs: []TopicInput{{Topic: "t1", Known: true, Clusters: []string{"a", "c", "b"}, StartAt: StartEarliest}},
			want: PlanResult{Start: []Want{
				{Key: Key{"t1", "b"}, StartAt: StartEarliest}, {Key: Key{"t1", "c"}, StartAt: StartEarliest},
			}},
		},
		{
			name:    "running and wanted: nothing",
			inputs:  []TopicInput{{Topic: "t1", Known: true, Clusters: []string{"a", "b"}, CursorRemotes: []string{"b"}}},
			running: map[Key]Rate{{"t1", "b"}: {}},
		},
		{
			name:    "rate change",
			inputs:  []TopicInput{{Topic: "t1", Known: true, Clusters: []string{"a", "b"}, Rates: map[string]Rate{"b": {MessagesPerSecond: 5}}}},
			running: map[Key]Rate{{"t1", "b"}: {}},
			want:    PlanResult{UpdateRate: []Want{{Key: Key{"t1", "b"}, Rate: Rate{MessagesPerSecond: 5}}}},
		},
		{
			name:    "remote removed: stop and delete cursor; stale cursor without runner deleted too",
			inputs:  []TopicInput{{Topic: "t1", Known: true, Clusters: []string{"a"}, CursorRemotes: []string{"b", "c"}}},
			running: map[Key]Rate{{"t1", "b"}: {}},
			want: PlanResult{Stop: []StopOrder{
				{Key: Key{"t1", "b"}, DeleteCursor: true, Running: true}, {Key: Key{"t1", "c"}, DeleteCursor: true},
			}},
		},
		{
			name:    "local cluster no longer listed: its replicators stop and their cursors go",
			inputs:  []TopicInput{{Topic: "t1", Known: true, Clusters: []string{"b", "c"}, CursorRemotes: []string{"b", "c"}}},
			running: map[Key]Rate{{"t1", "b"}: {}, {"t1", "c"}: {}},
			want: PlanResult{Stop: []StopOrder{
				{Key: Key{"t1", "b"}, DeleteCursor: true, Running: true}, {Key: Key{"t1", "c"}, DeleteCursor: true, Running: true},
			}},
		},
		{
			name:   "local cluster not listed: nothing starts",
			inputs: []TopicInput{{Topic: "t1", Known: true, Clusters: []string{"b"}}},
		},
		{
			name:    "unknown policies: never delete",
			inputs:  []TopicInput{{Topic: "t1", Known: false, CursorRemotes: []string{"b"}}},
			running: map[Key]Rate{{"t1", "b"}: {}},
		},
		{
			name:    "topic gone: stop, keep cursor",
			inputs:  []TopicInput{{Topic: "t2", Known: true, Clusters: []string{"a"}}},
			running: map[Key]Rate{{"t1", "b"}: {}},
			want:    PlanResult{Stop: []StopOrder{{Key: Key{"t1", "b"}, Running: true}}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Plan("a", tc.inputs, tc.running)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Plan =\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

func TestRatesAndStartAtFromPolicies(t *testing.T) {
	ns := adminapi.Policies{ReplicatorDispatchRate: map[string]adminapi.DispatchRate{
		"a": {DispatchThrottlingRateInMsg: 100},
		"c": {DispatchThrottlingRateInByte: 1000},
	}}
	got := RatesFrom("a", []string{"b", "c"}, ns, nil)
	want := map[string]Rate{"b": {MessagesPerSecond: 100}, "c": {BytesPerSecond: 1000}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("rates %v", got)
	}
	tp := &adminapi.TopicPolicies{ReplicatorDispatchRate: &adminapi.DispatchRate{DispatchThrottlingRateInMsg: 7}}
	if got := RatesFrom("a", []string{"b"}, ns, tp); got["b"] != (Rate{MessagesPerSecond: 7}) {
		t.Fatalf("topic rate %v", got)
	}
	if s := StartAtFrom(adminapi.Policies{Properties: map[string]string{"replicationStartAt": "earliest"}}, StartLatest); s != StartEarliest {
		t.Fatalf("start %v", s)
	}
	if s := StartAtFrom(adminapi.Policies{}, ""); s != StartLatest {
		t.Fatalf("default start %v", s)
	}
	if r := RemotesOfCursors([]string{"sub", "pulsar.repl.b", "pulsar.dedup", "meridian.repl-index"}); !reflect.DeepEqual(r, []string{"b"}) {
		t.Fatalf("remotes %v", r)
	}
}
