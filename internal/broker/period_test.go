package broker

import (
	"testing"
	"time"
)

// A periodic task on the stats ticker must not skip a tick because the previous tick was
// handled late (the backlog quota check ran 10 s apart under load with 5 s settings, and
// pulsar-client-go's TestSendContextExpired, which waits 6 s for it, failed).
func TestPeriodDueToleratesLateTicks(t *testing.T) {
	base := time.Unix(1_000_000, 0)
	const tick = 5 * time.Second
	cases := []struct {
		name      string
		sinceLast time.Duration
		period    time.Duration
		wantDue   bool
	}{
		{"next tick after a late one", tick - 30*time.Millisecond, tick, true},
		{"exactly one period", tick, tick, true},
		{"a minute on 5 s ticks, one tick short", 55 * time.Second, time.Minute, false},
		{"a minute on 5 s ticks, late previous tick", time.Minute - 200*time.Millisecond, time.Minute, true},
		{"period shorter than the tick", tick, time.Second, true},
	}
	for _, c := range cases {
		if got := periodDue(base.Add(c.sinceLast), base, c.period, tick); got != c.wantDue {
			t.Errorf("%s: periodDue = %v, want %v", c.name, got, c.wantDue)
		}
	}
}
