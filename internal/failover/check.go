// Package failover holds the failover checklist as automated checks (docs/geo-replication.md, §3.4
// and §8): whether a target cluster is ready to take over a namespace from its source. It talks to
// both clusters through their admin API only, so meridianctl and the broker's console run the same
// checks.
package failover

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
)

// Checker runs the checks of one source cluster.
type Checker struct {
	// Source is the admin API of the cluster the clients leave.
	Source *adminapi.Client
	// Target returns the admin API of a cluster by name (its serviceUrl as the source registered it).
	Target func(ctx context.Context, name string) (*adminapi.Client, error)
	// Timeout bounds each request.
	Timeout time.Duration
}

func step[T any](ctx context.Context, d time.Duration, fn func(context.Context) (T, error)) (T, error) {
	if d <= 0 {
		d = 30 * time.Second
	}
	sctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return fn(sctx)
}

func step0(ctx context.Context, d time.Duration, fn func(context.Context) error) error {
	_, err := step(ctx, d, func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx) })
	return err
}

// bytesText is a byte count for people.
func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, u := float64(n), "KMGTPE"
	i := -1
	for v >= unit && i < len(u)-1 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, u[i])
}

// Check outcomes.
const (
	StatusOK      = "ok"
	StatusWarn    = "warn"    // worth knowing; does not make the target not ready
	StatusFail    = "fail"    // the target is not ready
	StatusUnknown = "unknown" // could not tell
)

type Result struct {
	Check  string `json:"check"`
	Status string `json:"status"`
	Detail string `json:"detail"`
}

// Report is the outcome of one failover check.
type Report struct {
	Namespace string   `json:"namespace"`
	From      string   `json:"from"`
	To        string   `json:"to"`
	Checks    []Result `json:"checks"`
	// RPO: what the source holds that the target has not acknowledged, now.
	BacklogMessages int64 `json:"backlogMessages"`
	BacklogBytes    int64 `json:"backlogBytes"`
	BacklogAgeSecs  int64 `json:"backlogAgeSeconds"`
	// Verdict is ready, not-ready or unknown (exit 0, 1, 2).
	Verdict string `json:"verdict"`
}

func (r *Report) add(check, status, format string, args ...any) {
	r.Checks = append(r.Checks, Result{Check: check, Status: status, Detail: fmt.Sprintf(format, args...)})
}

// verdict: any fail makes the target not ready; otherwise any unknown makes it unknown.
func (r *Report) conclude() {
	r.Verdict = "ready"
	for _, c := range r.Checks {
		switch {
		case c.Status == StatusFail:
			r.Verdict = "not-ready"
			return
		case c.Status == StatusUnknown:
			r.Verdict = "unknown"
		}
	}
}

// ErrNotReady and ErrCannotTell give failover check its exit codes 1 and 2.
var (
	ErrNotReady   = errors.New("the target is not ready to take over")
	ErrCannotTell = errors.New("could not tell whether the target is ready")
)

// sourceFacts is what the check reads from the source for one namespace.
type sourceFacts struct {
	policies    adminapi.Policies
	partitioned map[string]int                 // partitioned topic -> partitions
	stats       map[string]adminapi.TopicStats // every topic or partition
}

func (ck Checker) readSource(ctx context.Context, c *adminapi.Client, ns string) (sourceFacts, error) {
	var f sourceFacts
	var err error
	if f.policies, err = step(ctx, ck.Timeout, func(ctx context.Context) (adminapi.Policies, error) { return c.GetPolicies(ctx, ns) }); err != nil {
		return f, fmt.Errorf("namespace %s: %w", ns, err)
	}
	parents, err := step(ctx, ck.Timeout, func(ctx context.Context) ([]string, error) { return c.ListPartitionedTopics(ctx, ns) })
	if err != nil {
		return f, err
	}
	f.partitioned = map[string]int{}
	for _, p := range parents {
		m, err := step(ctx, ck.Timeout, func(ctx context.Context) (adminapi.PartitionedTopicMetadata, error) {
			return c.GetPartitionedMetadata(ctx, p)
		})
		if err != nil {
			return f, err
		}
		f.partitioned[p] = m.Partitions
	}
	topics, err := step(ctx, ck.Timeout, func(ctx context.Context) ([]string, error) { return c.ListTopics(ctx, ns) })
	if err != nil {
		return f, err
	}
	f.stats = map[string]adminapi.TopicStats{}
	for _, t := range topics {
		st, err := step(ctx, ck.Timeout, func(ctx context.Context) (adminapi.TopicStats, error) { return c.TopicStats(ctx, t) })
		var apiErr *adminapi.Error
		if errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusNotFound {
			continue // deleted since it was listed
		}
		if err != nil {
			return f, fmt.Errorf("stats of %s: %w", t, err)
		}
		f.stats[t] = st
	}
	return f, nil
}

// Check runs the checklist for namespace ns ("tenant/ns") and target cluster to. Reading the
// source failing is "unknown"; everything about the target is judged.
func (ck Checker) Check(ctx context.Context, ns, to string) Report {
	r := Report{Namespace: ns, To: to}
	src := ck.Source
	facts, err := ck.readSource(ctx, src, ns)
	if err != nil {
		r.add("source", StatusUnknown, "reading the source: %v", err)
		r.conclude()
		return r
	}
	// The target: registered on the source, and answering.
	target, err := ck.Target(ctx, to)
	if err != nil {
		r.add("target registered", StatusFail, "%v", err)
		r.conclude()
		return r
	}
	r.add("target registered", StatusOK, "%s at %s", to, target.BaseURL())
	if err := step0(ctx, ck.Timeout, target.Ready); err != nil {
		r.add("target reachable", StatusFail, "%s: %v", to, err)
		r.conclude()
		return r
	}
	r.add("target reachable", StatusOK, "%s answers ready", to)

	// Tenant, namespace and policies on the target.
	tenant, _, _ := strings.Cut(ns, "/")
	if ti, err := step(ctx, ck.Timeout, func(ctx context.Context) (adminapi.TenantInfo, error) { return target.GetTenant(ctx, tenant) }); err != nil {
		r.add("tenant", StatusFail, "tenant %s on %s: %v", tenant, to, err)
	} else if !slices.Contains(ti.AllowedClusters, to) {
		r.add("tenant", StatusFail, "tenant %s on %s does not allow %s (allowed: %v)", tenant, to, to, ti.AllowedClusters)
	} else {
		r.add("tenant", StatusOK, "tenant %s allows %s", tenant, to)
	}
	targetPolicies, err := step(ctx, ck.Timeout, func(ctx context.Context) (adminapi.Policies, error) { return target.GetPolicies(ctx, ns) })
	if err != nil {
		r.add("namespace", StatusFail, "namespace %s on %s: %v", ns, to, err)
	} else {
		r.add("namespace", StatusOK, "%s exists on %s", ns, to)
		if diff := policyDifferences(facts.policies, targetPolicies); len(diff) > 0 {
			r.add("policies", StatusWarn, "differ from the source's: %s", strings.Join(diff, ", "))
		} else {
			r.add("policies", StatusOK, "the same as the source's")
		}
	}
	if slices.Contains(facts.policies.ReplicationClusters, to) {
		r.add("replication", StatusOK, "%s replicates to %s", ns, to)
	} else {
		r.add("replication", StatusFail, "%s does not replicate to %s (replication clusters %v): its messages stay on the source", ns, to, facts.policies.ReplicationClusters)
	}

	// Partition counts and schemas.
	var missing []string
	for _, p := range slices.Sorted(maps.Keys(facts.partitioned)) {
		m, err := step(ctx, ck.Timeout, func(ctx context.Context) (adminapi.PartitionedTopicMetadata, error) {
			return target.GetPartitionedMetadata(ctx, p)
		})
		if err != nil || m.Partitions != facts.partitioned[p] {
			missing = append(missing, fmt.Sprintf("%s (%d partitions here, %d there)", p, facts.partitioned[p], m.Partitions))
		}
	}
	if len(missing) > 0 {
		r.add("partitions", StatusFail, "%s", strings.Join(missing, "; "))
	} else {
		r.add("partitions", StatusOK, "%d partitioned topics with the same partition counts", len(facts.partitioned))
	}
	missing = nil
	schemas := 0
	for _, t := range schemaTopics(facts) {
		s, err := step(ctx, ck.Timeout, func(ctx context.Context) (adminapi.SchemaResponse, error) { return src.GetSchema(ctx, t, -1) })
		if err != nil {
			continue // no schema on the source
		}
		schemas++
		d, err := step(ctx, ck.Timeout, func(ctx context.Context) (adminapi.SchemaResponse, error) { return target.GetSchema(ctx, t, -1) })
		if err != nil || d.Type != s.Type || d.Data != s.Data {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		r.add("schemas", StatusFail, "missing or different on %s: %s", to, strings.Join(missing, ", "))
	} else {
		r.add("schemas", StatusOK, "%d schemas present on %s", schemas, to)
	}

	// The replication backlog: what would be lost if the source died now.
	var notReplicating []string
	for _, t := range slices.Sorted(maps.Keys(facts.stats)) {
		rs, ok := facts.stats[t].Replication[to]
		if !ok {
			notReplicating = append(notReplicating, t)
			continue
		}
		r.BacklogMessages += rs.ReplicationBacklog
		r.BacklogBytes += rs.ReplicationBacklogBytes
		r.BacklogAgeSecs = max(r.BacklogAgeSecs, rs.ReplicationDelayInSeconds)
	}
	switch {
	case len(notReplicating) > 0:
		r.add("replication backlog", StatusFail, "no replicator to %s on %s", to, strings.Join(notReplicating, ", "))
	case r.BacklogMessages > 0:
		r.add("replication backlog", StatusFail, "%d entries (%s), the oldest %ds old: lost if the source died now", r.BacklogMessages, bytesText(r.BacklogBytes), r.BacklogAgeSecs)
	default:
		r.add("replication backlog", StatusOK, "0: %s has everything the source stored", to)
	}

	// Subscriptions: present on the target, and how fresh their synced state is.
	var subsMissing, notReplicated, stale []string
	subs := 0
	for _, t := range slices.Sorted(maps.Keys(facts.stats)) {
		st := facts.stats[t]
		var there adminapi.TopicStats
		if len(st.Subscriptions) > 0 {
			there, _ = step(ctx, ck.Timeout, func(ctx context.Context) (adminapi.TopicStats, error) { return target.TopicStats(ctx, t) })
		}
		for _, name := range slices.Sorted(maps.Keys(st.Subscriptions)) {
			s := st.Subscriptions[name]
			if !s.IsDurable {
				continue
			}
			subs++
			if _, ok := there.Subscriptions[name]; !ok {
				subsMissing = append(subsMissing, t+" "+name)
				continue
			}
			if !s.IsReplicated {
				notReplicated = append(notReplicated, t+" "+name)
				continue
			}
			if sync := s.ReplicatedSubscriptionSync; sync != nil {
				if ob, ok := sync.Outbound[to]; ok && (ob.PendingStates > 0 || ob.SyncLagMs > 1000) {
					stale = append(stale, fmt.Sprintf("%s %s (%d states pending, lag %d ms)", t, name, ob.PendingStates, ob.SyncLagMs))
				}
			}
		}
	}
	switch {
	case len(subsMissing) > 0:
		r.add("subscriptions", StatusFail, "missing on %s: %s", to, strings.Join(subsMissing, "; "))
	case len(stale) > 0:
		r.add("subscriptions", StatusFail, "state not yet synced to %s: %s", to, strings.Join(stale, "; "))
	default:
		r.add("subscriptions", StatusOK, "%d durable subscriptions present on %s", subs, to)
	}
	if len(notReplicated) > 0 {
		r.add("subscription positions", StatusWarn, "not replicated (their position on %s is its own; move with subscriptions sync-position): %s", to, strings.Join(notReplicated, "; "))
	}

	// Clients still on the source.
	producers, consumers := 0, 0
	for _, st := range facts.stats {
		for _, p := range st.Publishers {
			if !strings.HasPrefix(p.ProducerName, "pulsar.repl.") {
				producers++
			}
		}
		for _, s := range st.Subscriptions {
			consumers += len(s.Consumers)
		}
	}
	status := StatusOK
	if producers+consumers > 0 {
		status = StatusWarn
	}
	r.add("clients on the source", status, "%d producers, %d consumers connected", producers, consumers)
	r.conclude()
	return r
}

// schemaTopics lists the topics whose schema is compared: partitioned parents and the rest.
func schemaTopics(f sourceFacts) []string {
	seen := map[string]bool{}
	for p := range f.partitioned {
		seen[p] = true
	}
	for t := range f.stats {
		if i := strings.Index(t, "-partition-"); i >= 0 {
			continue // its parent's schema is the one that counts
		}
		seen[t] = true
	}
	return slices.Sorted(maps.Keys(seen))
}

// policyDifferences names the policies that differ between two clusters' copies of a namespace
// (replication clusters and bundles are each cluster's own and not compared).
func policyDifferences(a, b adminapi.Policies) []string {
	ma, mb := policyMap(a), policyMap(b)
	var out []string
	for _, k := range slices.Sorted(maps.Keys(ma)) {
		if k == "replication_clusters" || k == "bundles" {
			continue
		}
		if fmt.Sprint(ma[k]) != fmt.Sprint(mb[k]) {
			out = append(out, k)
		}
	}
	return out
}

// policyMap is a namespace's policies as their JSON fields.
func policyMap(p adminapi.Policies) map[string]any {
	b, err := json.Marshal(p)
	if err != nil {
		return nil
	}
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}
