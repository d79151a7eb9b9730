package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/meridian-mq/meridian/adminapi"
)

// failover check: the operators' failover checklist (docs/geo-replication.md, "Failover and
// switchover runbook") as automated checks against the source (--admin-url) and the target.

// Check outcomes, worst last.
const (
	checkOK      = "ok"
	checkWarn    = "warn"    // worth knowing; does not make the target not ready
	checkFail    = "fail"    // the target is not ready
	checkUnknown = "unknown" // could not tell
)

type checkResult struct {
	Check  string `json:"check"`
	Status string `json:"status"`
	Detail string `json:"detail"`
}

// failoverReport is the outcome of one failover check.
type failoverReport struct {
	Namespace string        `json:"namespace"`
	From      string        `json:"from"`
	To        string        `json:"to"`
	Checks    []checkResult `json:"checks"`
	// RPO: what the source holds that the target has not acknowledged, now.
	BacklogMessages int64 `json:"backlogMessages"`
	BacklogBytes    int64 `json:"backlogBytes"`
	BacklogAgeSecs  int64 `json:"backlogAgeSeconds"`
	// Verdict is ready, not-ready or unknown (exit 0, 1, 2).
	Verdict string `json:"verdict"`
}

func (r *failoverReport) add(check, status, format string, args ...any) {
	r.Checks = append(r.Checks, checkResult{Check: check, Status: status, Detail: fmt.Sprintf(format, args...)})
}

// verdict: any fail makes the target not ready; otherwise any unknown makes it unknown.
func (r *failoverReport) conclude() {
	r.Verdict = "ready"
	for _, c := range r.Checks {
		switch {
		case c.Status == checkFail:
			r.Verdict = "not-ready"
			return
		case c.Status == checkUnknown:
			r.Verdict = "unknown"
		}
	}
}

// errNotReady and errCannotTell give failover check its exit codes 1 and 2.
var (
	errNotReady   = errors.New("the target is not ready to take over")
	errCannotTell = errors.New("could not tell whether the target is ready")
)

// sourceFacts is what the check reads from the source for one namespace.
type sourceFacts struct {
	policies    adminapi.Policies
	partitioned map[string]int                 // partitioned topic -> partitions
	stats       map[string]adminapi.TopicStats // every topic or partition
}

func readSource(ctx context.Context, a *app, c *adminapi.Client, ns string) (sourceFacts, error) {
	var f sourceFacts
	var err error
	if f.policies, err = withStepTimeout(ctx, a.timeout, func(ctx context.Context) (adminapi.Policies, error) { return c.GetPolicies(ctx, ns) }); err != nil {
		return f, fmt.Errorf("namespace %s: %w", ns, err)
	}
	parents, err := withStepTimeout(ctx, a.timeout, func(ctx context.Context) ([]string, error) { return c.ListPartitionedTopics(ctx, ns) })
	if err != nil {
		return f, err
	}
	f.partitioned = map[string]int{}
	for _, p := range parents {
		m, err := withStepTimeout(ctx, a.timeout, func(ctx context.Context) (adminapi.PartitionedTopicMetadata, error) {
			return c.GetPartitionedMetadata(ctx, p)
		})
		if err != nil {
			return f, err
		}
		f.partitioned[p] = m.Partitions
	}
	topics, err := withStepTimeout(ctx, a.timeout, func(ctx context.Context) ([]string, error) { return c.ListTopics(ctx, ns) })
	if err != nil {
		return f, err
	}
	f.stats = map[string]adminapi.TopicStats{}
	for _, t := range topics {
		st, err := withStepTimeout(ctx, a.timeout, func(ctx context.Context) (adminapi.TopicStats, error) { return c.TopicStats(ctx, t) })
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

// checkFailover runs the checklist. Reading the source failing is "unknown"; everything about the
// target is judged.
func checkFailover(ctx context.Context, a *app, ns, to string) failoverReport {
	r := failoverReport{Namespace: ns, To: to}
	src, err := a.api()
	if err != nil {
		r.add("source", checkUnknown, "%v", err)
		r.conclude()
		return r
	}
	facts, err := readSource(ctx, a, src, ns)
	if err != nil {
		r.add("source", checkUnknown, "reading the source: %v", err)
		r.conclude()
		return r
	}
	// The target: registered on the source, and answering.
	target, err := clusterAdmin(ctx, a, to)
	if err != nil {
		r.add("target registered", checkFail, "%v", err)
		r.conclude()
		return r
	}
	r.add("target registered", checkOK, "%s at %s", to, target.BaseURL())
	if err := withStepTimeout0(ctx, a.timeout, target.Ready); err != nil {
		r.add("target reachable", checkFail, "%s: %v", to, err)
		r.conclude()
		return r
	}
	r.add("target reachable", checkOK, "%s answers ready", to)

	// Tenant, namespace and policies on the target.
	tenant, _, _ := strings.Cut(ns, "/")
	if ti, err := withStepTimeout(ctx, a.timeout, func(ctx context.Context) (adminapi.TenantInfo, error) { return target.GetTenant(ctx, tenant) }); err != nil {
		r.add("tenant", checkFail, "tenant %s on %s: %v", tenant, to, err)
	} else if !slices.Contains(ti.AllowedClusters, to) {
		r.add("tenant", checkFail, "tenant %s on %s does not allow %s (allowed: %v)", tenant, to, to, ti.AllowedClusters)
	} else {
		r.add("tenant", checkOK, "tenant %s allows %s", tenant, to)
	}
	targetPolicies, err := withStepTimeout(ctx, a.timeout, func(ctx context.Context) (adminapi.Policies, error) { return target.GetPolicies(ctx, ns) })
	if err != nil {
		r.add("namespace", checkFail, "namespace %s on %s: %v", ns, to, err)
	} else {
		r.add("namespace", checkOK, "%s exists on %s", ns, to)
		if diff := policyDifferences(facts.policies, targetPolicies); len(diff) > 0 {
			r.add("policies", checkWarn, "differ from the source's: %s", strings.Join(diff, ", "))
		} else {
			r.add("policies", checkOK, "the same as the source's")
		}
	}
	if slices.Contains(facts.policies.ReplicationClusters, to) {
		r.add("replication", checkOK, "%s replicates to %s", ns, to)
	} else {
		r.add("replication", checkFail, "%s does not replicate to %s (replication clusters %v): its messages stay on the source", ns, to, facts.policies.ReplicationClusters)
	}

	// Partition counts and schemas.
	var missing []string
	for _, p := range slices.Sorted(maps.Keys(facts.partitioned)) {
		m, err := withStepTimeout(ctx, a.timeout, func(ctx context.Context) (adminapi.PartitionedTopicMetadata, error) {
			return target.GetPartitionedMetadata(ctx, p)
		})
		if err != nil || m.Partitions != facts.partitioned[p] {
			missing = append(missing, fmt.Sprintf("%s (%d partitions here, %d there)", p, facts.partitioned[p], m.Partitions))
		}
	}
	if len(missing) > 0 {
		r.add("partitions", checkFail, "%s", strings.Join(missing, "; "))
	} else {
		r.add("partitions", checkOK, "%d partitioned topics with the same partition counts", len(facts.partitioned))
	}
	missing = nil
	schemas := 0
	for _, t := range schemaTopics(facts) {
		s, err := withStepTimeout(ctx, a.timeout, func(ctx context.Context) (adminapi.SchemaResponse, error) { return src.GetSchema(ctx, t, -1) })
		if err != nil {
			continue // no schema on the source
		}
		schemas++
		d, err := withStepTimeout(ctx, a.timeout, func(ctx context.Context) (adminapi.SchemaResponse, error) { return target.GetSchema(ctx, t, -1) })
		if err != nil || d.Type != s.Type || d.Data != s.Data {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		r.add("schemas", checkFail, "missing or different on %s: %s", to, strings.Join(missing, ", "))
	} else {
		r.add("schemas", checkOK, "%d schemas present on %s", schemas, to)
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
		r.add("replication backlog", checkFail, "no replicator to %s on %s", to, strings.Join(notReplicating, ", "))
	case r.BacklogMessages > 0:
		r.add("replication backlog", checkFail, "%d entries (%s), the oldest %ds old: lost if the source died now", r.BacklogMessages, human(float64(r.BacklogBytes)), r.BacklogAgeSecs)
	default:
		r.add("replication backlog", checkOK, "0: %s has everything the source stored", to)
	}

	// Subscriptions: present on the target, and how fresh their synced state is.
	var subsMissing, notReplicated, stale []string
	subs := 0
	for _, t := range slices.Sorted(maps.Keys(facts.stats)) {
		st := facts.stats[t]
		var there adminapi.TopicStats
		if len(st.Subscriptions) > 0 {
			there, _ = withStepTimeout(ctx, a.timeout, func(ctx context.Context) (adminapi.TopicStats, error) { return target.TopicStats(ctx, t) })
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
		r.add("subscriptions", checkFail, "missing on %s: %s", to, strings.Join(subsMissing, "; "))
	case len(stale) > 0:
		r.add("subscriptions", checkFail, "state not yet synced to %s: %s", to, strings.Join(stale, "; "))
	default:
		r.add("subscriptions", checkOK, "%d durable subscriptions present on %s", subs, to)
	}
	if len(notReplicated) > 0 {
		r.add("subscription positions", checkWarn, "not replicated (their position on %s is its own; move with subscriptions sync-position): %s", to, strings.Join(notReplicated, "; "))
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
	status := checkOK
	if producers+consumers > 0 {
		status = checkWarn
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

func failoverCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "failover", Short: "Check whether a namespace can fail over to another cluster"}
	var to string
	check := &cobra.Command{
		Use:   "check TENANT/NAMESPACE --to CLUSTER",
		Short: "The failover checklist as automated checks; exit 0 ready, 1 not ready, 2 could not tell",
		Long: `Runs against the source cluster (--admin-url) and the target (its serviceUrl as registered on the
source): target registered and reachable; tenant, namespace, policies, partition counts and schemas present
on the target; replication to the target on, and its backlog now (messages, bytes, age: what the source
would take with it if it died this moment); every durable subscription present on the target and its
synced state fresh; producers and consumers still connected to the source. Exit status 0 when the target
is ready, 1 when it is not, 2 when the checks could not tell.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if to == "" {
				return usageErr("--to is required")
			}
			r := checkFailover(cmd.Context(), a, args[0], to)
			if err := a.show(r, func(tw *tabwriter.Writer) { writeFailoverReport(tw, r) }); err != nil {
				return err
			}
			switch r.Verdict {
			case "not-ready":
				return errNotReady
			case "unknown":
				return errCannotTell
			}
			return nil
		},
	}
	check.Flags().StringVar(&to, "to", "", "the cluster to fail over to")
	cmd.AddCommand(check)
	return cmd
}

func writeFailoverReport(tw *tabwriter.Writer, r failoverReport) {
	fmt.Fprintln(tw, "CHECK\tSTATUS\tDETAIL")
	for _, c := range r.Checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Check, c.Status, c.Detail)
	}
	fmt.Fprintf(tw, "\n%s -> %s: %s\n", r.Namespace, r.To, r.Verdict)
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
