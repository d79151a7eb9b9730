package replication

import (
	"slices"
	"strings"

	"github.com/meridian-mq/meridian/adminapi"
)

// Lifecycle decisions are made by Plan, a pure function from what the configuration says and what
// runs to what must start, stop or change. Manager feeds it and executes its answer.

// Key identifies a replicator.
type Key struct{ Topic, Remote string }

// TopicInput is what Plan needs to know about one local topic.
type TopicInput struct {
	Topic string
	// Known is false when the topic's namespace policies are not known (namespace missing or the
	// catalog not loaded): nothing is started and, above all, no cursor is deleted.
	Known bool
	// Clusters are the effective replication clusters (topic-level override, else the namespace's).
	Clusters []string
	// CursorRemotes are the remotes that have a replication cursor on the topic ("pulsar.repl.<r>").
	CursorRemotes []string
	// StartAt for new replicators of this topic (namespace policy, else the broker default).
	StartAt StartAt
	// Rates by remote (replicatorDispatchRate).
	Rates map[string]Rate
}

// Want is a replicator that must run, with its settings.
type Want struct {
	Key
	StartAt StartAt
	Rate    Rate
}

// StopOrder stops a replicator (if running) and, when DeleteCursor is set, removes its cursor: the
// remote was removed from the topic's replication clusters.
type StopOrder struct {
	Key
	DeleteCursor bool
	Running      bool
}

// PlanResult is what to do.
type PlanResult struct {
	Start      []Want
	Stop       []StopOrder
	UpdateRate []Want
}

// Plan decides, for the topics in inputs (and only those), which replicators start, stop or change
// rate. running maps the replicators of those topics that run now to their current rate. Topics in
// running but absent from inputs (deleted, unloaded) are stopped without deleting cursors.
func Plan(local string, inputs []TopicInput, running map[Key]Rate) PlanResult {
	var res PlanResult
	seen := map[string]bool{}
	for _, in := range inputs {
		seen[in.Topic] = true
		if !in.Known {
			continue
		}
		// A cluster replicates a topic out only while it is itself in the topic's replication
		// clusters (Pulsar's rule): removing a cluster from the list stops its replicators too,
		// instead of leaving it sending to everyone still listed.
		want := map[string]bool{}
		if slices.Contains(in.Clusters, local) {
			for _, c := range in.Clusters {
				if c != "" && c != local {
					want[c] = true
				}
			}
		}
		for _, r := range sortedKeys(want) {
			k := Key{in.Topic, r}
			rate := in.Rates[r]
			cur, ok := running[k]
			switch {
			case !ok:
				res.Start = append(res.Start, Want{Key: k, StartAt: in.StartAt, Rate: rate})
			case cur != rate:
				res.UpdateRate = append(res.UpdateRate, Want{Key: k, StartAt: in.StartAt, Rate: rate})
			}
		}
		removed := map[string]bool{}
		for k := range running {
			if k.Topic == in.Topic && !want[k.Remote] {
				removed[k.Remote] = true
			}
		}
		for _, r := range in.CursorRemotes {
			if r != local && !want[r] {
				removed[r] = true
			}
		}
		for _, r := range sortedKeys(removed) {
			_, isRunning := running[Key{in.Topic, r}]
			res.Stop = append(res.Stop, StopOrder{Key: Key{in.Topic, r}, DeleteCursor: true, Running: isRunning})
		}
	}
	var gone []Key
	for k := range running {
		if !seen[k.Topic] {
			gone = append(gone, k)
		}
	}
	slices.SortFunc(gone, func(a, b Key) int { return strings.Compare(a.Topic+"\x00"+a.Remote, b.Topic+"\x00"+b.Remote) })
	for _, k := range gone {
		res.Stop = append(res.Stop, StopOrder{Key: k, Running: true})
	}
	return res
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// RemotesOfCursors returns the remote cluster names of replication cursor names
// ("pulsar.repl.<remote>"), ignoring other cursors.
func RemotesOfCursors(names []string) []string {
	var out []string
	for _, n := range names {
		if r, ok := strings.CutPrefix(n, DefaultPrefix+"."); ok && r != "" {
			out = append(out, r)
		}
	}
	return out
}

// RatesFrom computes the replicatorDispatchRate per remote from the namespace policy (keyed by
// remote cluster name; a key equal to the local cluster name, or "", applies to every remote, as
// Pulsar's namespace-level setting keyed by the local cluster does) and the topic-level policy
// (applies to every remote and wins).
func RatesFrom(local string, remotes []string, ns adminapi.Policies, tp *adminapi.TopicPolicies) map[string]Rate {
	conv := func(d adminapi.DispatchRate) Rate {
		r := Rate{}
		if d.DispatchThrottlingRateInMsg > 0 {
			r.MessagesPerSecond = float64(d.DispatchThrottlingRateInMsg)
		}
		if d.DispatchThrottlingRateInByte > 0 {
			r.BytesPerSecond = float64(d.DispatchThrottlingRateInByte)
		}
		return r
	}
	out := map[string]Rate{}
	for _, r := range remotes {
		if tp != nil && tp.ReplicatorDispatchRate != nil {
			out[r] = conv(*tp.ReplicatorDispatchRate)
			continue
		}
		for _, key := range []string{r, local, ""} {
			if d, ok := ns.ReplicatorDispatchRate[key]; ok {
				out[r] = conv(d)
				break
			}
		}
	}
	return out
}

// NamespaceStartAtProperty is the namespace property that overrides --replication-start-at for new
// replicators of the namespace's topics ("earliest" or "latest").
const NamespaceStartAtProperty = "replicationStartAt"

// StartAtFrom returns the namespace's start position, or def.
func StartAtFrom(ns adminapi.Policies, def StartAt) StartAt {
	if v, ok := ns.Properties[NamespaceStartAtProperty]; ok {
		if s, err := ParseStartAt(v); err == nil && v != "" {
			return s
		}
	}
	if def == "" {
		return StartLatest
	}
	return def
}
