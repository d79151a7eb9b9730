package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/failover"
)

// promoteReport is the outcome of failover promote: what the target (this cluster) did, and what
// the lost source held that never arrived here, from the positions the source last advertised.
type promoteReport struct {
	Namespace string `json:"namespace"`
	From      string `json:"from"`
	To        string `json:"to"`
	// FailbackReplication says whether the namespace here replicates back to the source (so that
	// what is produced here reaches it once it returns), and whether promote turned it on.
	FailbackReplication string                      `json:"failbackReplication"`
	Topics              []adminapi.SourceTopicState `json:"topics"`
	// Missing sums the estimates; MissingExact is true when every one of them is exact.
	Missing      int64 `json:"missing"`
	MissingExact bool  `json:"missingExact"`
}

func failoverPromoteCmd(a *app) *cobra.Command {
	var from, to string
	var dryRun, force bool
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "promote TENANT/NAMESPACE (--to TARGET | --from LOST-SOURCE)",
		Short: "Planned (--to): switch the namespace's clients over; unplanned (--from): take over from a lost cluster and report what it never sent",
		Long: `Planned, with --to B, against the source (--admin-url), while it runs: runs failover check and
refuses unless B is ready (--force skips that), then sets the source's migration target to B's URLs and
switches the namespace over (Pulsar's blue-green migration; docs/geo-replication.md §7): producers and
consumers move to B by themselves. With --wait it polls until no producer or consumer is left on the
source (progress on stderr), exit 1 if some are still there when it runs out.

Unplanned, with --from A, against the cluster that takes over (--admin-url), after A has gone. It makes sure
the namespace here replicates back to the source, so that what is produced here reaches it once it
returns (failback), and reports, per topic, what the source held that never arrived here: the source
advertises its last stored position of every topic written to this cluster about once a second, and
this cluster compares it with the last of the source's messages it stores. "exact" counts are exact;
the others are the source's backlog towards this cluster at its last advertisement (an upper bound
then; messages written in the last second before the loss are not in any advertisement). When the
source comes back, its replicators send that tail by themselves if it still replicates here.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (from == "") == (to == "") {
				return usageErr("give --to TARGET (planned, against the source) or --from LOST-SOURCE (unplanned, against the target)")
			}
			ns := args[0]
			if to != "" {
				return promotePlanned(cmd, a, ns, to, dryRun, force, wait)
			}
			return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
				r := promoteReport{Namespace: ns, From: from, MissingExact: true}
				clusters, err := c.GetReplicationClusters(ctx, ns)
				if err != nil {
					return err
				}
				switch {
				case slices.Contains(clusters, from):
					r.FailbackReplication = "already on"
				case dryRun:
					r.FailbackReplication = "off (would be turned on)"
				default:
					if err := c.SetReplicationClusters(ctx, ns, append(clusters, from)); err != nil {
						return fmt.Errorf("turning on replication back to %s: %w", from, err)
					}
					r.FailbackReplication = "turned on"
				}
				var states []adminapi.SourceTopicState
				if _, err := c.Do(ctx, http.MethodGet, "/admin/v2/namespaces/"+ns+"/replicationSources", map[string][]string{"source": {from}}, nil, &states); err != nil {
					return err
				}
				r.Topics = states
				for _, s := range states {
					r.Missing += s.Missing
					r.MissingExact = r.MissingExact && s.MissingExact
				}
				return a.show(r, func(tw *tabwriter.Writer) { writePromoteReport(tw, r) })
			})
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "unplanned: the cluster that was lost")
	cmd.Flags().StringVar(&to, "to", "", "planned: the cluster the namespace's clients move to")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "report only; change nothing")
	cmd.Flags().BoolVar(&force, "force", false, "planned: switch over even when failover check says the target is not ready")
	cmd.Flags().DurationVar(&wait, "wait", 0, "planned: poll until every producer and consumer left the source, at most this long")
	return cmd
}

// localCluster finds the name of the cluster at --admin-url: the one whose broker list it knows.
func localCluster(ctx context.Context, c *adminapi.Client) (string, error) {
	names, err := c.ListClusters(ctx)
	if err != nil {
		return "", err
	}
	for _, n := range names {
		var brokers []string
		if _, err := c.Do(ctx, http.MethodGet, "/admin/v2/brokers/"+n, nil, nil, &brokers); err == nil && len(brokers) > 0 {
			return n, nil
		}
	}
	return "", fmt.Errorf("cannot tell which of %v the cluster at --admin-url is", names)
}

// promotePlanned switches a namespace's clients from the source (--admin-url) over to target.
func promotePlanned(cmd *cobra.Command, a *app, ns, target string, dryRun, force bool, wait time.Duration) error {
	ctx := cmd.Context()
	check := a.failoverChecker().Check(ctx, ns, target)
	if check.Verdict != "ready" && !force {
		_ = a.show(check, func(tw *tabwriter.Writer) { writeFailoverReport(tw, check) })
		return fmt.Errorf("%w (--force switches over anyway)", failover.ErrNotReady)
	}
	c, err := a.api()
	if err != nil {
		return err
	}
	source, err := withStepTimeout(ctx, a.timeout, func(ctx context.Context) (string, error) { return localCluster(ctx, c) })
	if err != nil {
		return err
	}
	data, err := withStepTimeout(ctx, a.timeout, func(ctx context.Context) (adminapi.ClusterData, error) { return c.GetCluster(ctx, target) })
	if err != nil {
		return fmt.Errorf("cluster %s: %w", target, err)
	}
	urls := map[string]string{"serviceUrl": data.ServiceURL, "brokerServiceUrl": data.BrokerServiceURL,
		"serviceUrlTls": data.ServiceURLTLS, "brokerServiceUrlTls": data.BrokerServiceURLTLS}
	if dryRun {
		return a.done("would switch %s over from %s to %s (%s, %s)", ns, source, target, data.BrokerServiceURL, data.ServiceURL)
	}
	// The target URLs first, without moving anything; then the namespace's switch.
	if err := withStepTimeout0(ctx, a.timeout, func(ctx context.Context) error {
		_, err := c.Do(ctx, http.MethodPost, "/admin/v2/clusters/"+source+"/migrate", map[string][]string{"migrated": {"false"}}, urls, nil)
		return err
	}); err != nil {
		return fmt.Errorf("setting %s's migration target: %w", source, err)
	}
	if err := withStepTimeout0(ctx, a.timeout, func(ctx context.Context) error {
		_, err := c.Do(ctx, http.MethodPost, "/admin/v2/namespaces/"+ns+"/migration", nil, true, nil)
		return err
	}); err != nil {
		return fmt.Errorf("switching %s over: %w", ns, err)
	}
	fmt.Fprintf(a.errOut, "%s: switching over from %s to %s\n", ns, source, target)
	if wait <= 0 {
		return a.done("%s switched over to %s: its clients move by themselves", ns, target)
	}
	deadline := time.Now().Add(wait)
	for {
		producers, consumers, err := clientsOn(ctx, a, c, ns)
		if err != nil {
			return err
		}
		if a.output != "json" {
			fmt.Fprintf(a.errOut, "on %s: %d producers, %d consumers\n", source, producers, consumers)
		}
		if producers+consumers == 0 {
			return a.done("%s switched over to %s: no client left on %s", ns, target, source)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %d producers and %d consumers still on %s after %s", failover.ErrNotReady, producers, consumers, source, wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// clientsOn counts the producers (replicators aside) and consumers connected to ns's topics.
func clientsOn(ctx context.Context, a *app, c *adminapi.Client, ns string) (producers, consumers int, err error) {
	topics, err := withStepTimeout(ctx, a.timeout, func(ctx context.Context) ([]string, error) { return c.ListTopics(ctx, ns) })
	if err != nil {
		return 0, 0, err
	}
	for _, t := range topics {
		st, err := withStepTimeout(ctx, a.timeout, func(ctx context.Context) (adminapi.TopicStats, error) { return c.TopicStats(ctx, t) })
		if err != nil {
			continue // unloaded or deleted meanwhile
		}
		for _, p := range st.Publishers {
			if !strings.HasPrefix(p.ProducerName, "pulsar.repl.") {
				producers++
			}
		}
		for _, s := range st.Subscriptions {
			consumers += len(s.Consumers)
		}
	}
	return producers, consumers, nil
}

func writePromoteReport(tw *tabwriter.Writer, r promoteReport) {
	fmt.Fprintf(tw, "replication back to %s\t%s\n\n", r.From, r.FailbackReplication)
	fmt.Fprintln(tw, "TOPIC\tLAST ON SOURCE\tARRIVED THROUGH\tMISSING\tADVERTISED")
	for _, s := range r.Topics {
		exact := "exact"
		if !s.MissingExact {
			exact = "at most"
		}
		arrived := s.ArrivedThrough
		if arrived == "" {
			arrived = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d (%s)\t%s ago\n", s.Topic, s.LastPosition, arrived, s.Missing, exact,
			time.Since(time.UnixMilli(s.ReceivedAt)).Round(time.Second))
	}
	total := fmt.Sprintf("%d messages", r.Missing)
	if !r.MissingExact {
		total = "at most " + total
	}
	fmt.Fprintf(tw, "\n%s held %s that never reached this cluster (as of its last advertisements)\n", r.From, total)
}
