package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/failover"
)

// failoverChecker runs the failover checklist (internal/failover) against --admin-url as the
// source and the target's registered serviceUrl.
func (a *app) failoverChecker() failover.Checker {
	src, _ := a.api() // an unusable --admin-url fails the first request, reported as "source: unknown"
	return failover.Checker{Source: src, Timeout: a.timeout,
		Target: func(ctx context.Context, name string) (*adminapi.Client, error) { return clusterAdmin(ctx, a, name) }}
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
			r := a.failoverChecker().Check(cmd.Context(), args[0], to)
			if err := a.show(r, func(tw *tabwriter.Writer) { writeFailoverReport(tw, r) }); err != nil {
				return err
			}
			switch r.Verdict {
			case "not-ready":
				return failover.ErrNotReady
			case "unknown":
				return failover.ErrCannotTell
			}
			return nil
		},
	}
	check.Flags().StringVar(&to, "to", "", "the cluster to fail over to")
	cmd.AddCommand(check, failoverPromoteCmd(a))
	return cmd
}

func writeFailoverReport(tw *tabwriter.Writer, r failover.Report) {
	fmt.Fprintln(tw, "CHECK\tSTATUS\tDETAIL")
	for _, c := range r.Checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Check, c.Status, c.Detail)
	}
	fmt.Fprintf(tw, "\n%s -> %s: %s\n", r.Namespace, r.To, r.Verdict)
}
