package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/meridian-mq/meridian/adminapi"
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
	var from string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "promote TENANT/NAMESPACE --from SOURCE",
		Short: "Unplanned failover: make this cluster (--admin-url) the primary and report what the lost source never sent",
		Long: `Runs against the cluster that takes over (--admin-url), after the source has gone. It makes sure
the namespace here replicates back to the source, so that what is produced here reaches it once it
returns (failback), and reports, per topic, what the source held that never arrived here: the source
advertises its last stored position of every topic written to this cluster about once a second, and
this cluster compares it with the last of the source's messages it stores. "exact" counts are exact;
the others are the source's backlog towards this cluster at its last advertisement (an upper bound
then; messages written in the last second before the loss are not in any advertisement). When the
source comes back, its replicators send that tail by themselves if it still replicates here.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if from == "" {
				return usageErr("--from is required: the cluster that was lost")
			}
			ns := args[0]
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
	cmd.Flags().StringVar(&from, "from", "", "the cluster that was lost")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "report only; change nothing")
	return cmd
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
