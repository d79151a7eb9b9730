package main

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/meridian-mq/meridian/adminapi"
)

func topicsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "topics", Short: "Manage topics"}
	one := cobra.ExactArgs(1)

	list := &cobra.Command{Use: "list TENANT/NAMESPACE", Short: "List topics and partitions", Args: one, RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			l, err := c.ListTopics(ctx, args[0])
			if err != nil {
				return err
			}
			return a.showList(l)
		})
	}}
	listPart := &cobra.Command{Use: "list-partitioned-topics TENANT/NAMESPACE", Short: "List partitioned topics", Args: one, RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			l, err := c.ListPartitionedTopics(ctx, args[0])
			if err != nil {
				return err
			}
			return a.showList(l)
		})
	}}
	var partitions int
	create := &cobra.Command{Use: "create TOPIC", Short: "Create a topic (partitioned with -p N)", Args: one, RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			if err := c.CreateTopic(ctx, args[0], partitions, nil); err != nil {
				return err
			}
			if partitions > 0 {
				return a.done("partitioned topic %s created with %d partitions", args[0], partitions)
			}
			return a.done("topic %s created", args[0])
		})
	}}
	create.Flags().IntVarP(&partitions, "partitions", "p", 0, "number of partitions (0 = non-partitioned)")
	createPart := &cobra.Command{Use: "create-partitioned-topic TOPIC", Short: "Create a partitioned topic", Args: one, RunE: func(cmd *cobra.Command, args []string) error {
		if partitions < 1 {
			return usageErr("--partitions must be at least 1")
		}
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			if err := c.CreateTopic(ctx, args[0], partitions, nil); err != nil {
				return err
			}
			return a.done("partitioned topic %s created with %d partitions", args[0], partitions)
		})
	}}
	createPart.Flags().IntVarP(&partitions, "partitions", "p", 0, "number of partitions")
	update := &cobra.Command{Use: "update-partitioned-topic TOPIC", Short: "Raise the number of partitions", Args: one, RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			if err := c.UpdatePartitions(ctx, args[0], partitions); err != nil {
				return err
			}
			return a.done("%s now has %d partitions", args[0], partitions)
		})
	}}
	update.Flags().IntVarP(&partitions, "partitions", "p", 0, "new number of partitions")
	meta := &cobra.Command{Use: "get-partitioned-topic-metadata TOPIC", Short: "Show the number of partitions (0 = non-partitioned)", Args: one, RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			m, err := c.GetPartitionedMetadata(ctx, args[0])
			if err != nil {
				return err
			}
			return a.show(m, func(tw *tabwriter.Writer) { fmt.Fprintf(tw, "partitions\t%d\n", m.Partitions) })
		})
	}}
	var force bool
	del := &cobra.Command{Use: "delete TOPIC", Short: "Delete a topic (partitioned or not) and its data", Args: one, RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			m, err := c.GetPartitionedMetadata(ctx, args[0])
			if err != nil {
				return err
			}
			if err := c.DeleteTopic(ctx, args[0], m.Partitions > 0, force); err != nil {
				return err
			}
			return a.done("topic %s deleted", args[0])
		})
	}}
	del.Flags().BoolVarP(&force, "force", "f", false, "disconnect producers and consumers first")
	stats := &cobra.Command{Use: "stats TOPIC", Short: "Show a topic's stats (partitioned topics aggregated), replication included", Args: one, RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			m, err := c.GetPartitionedMetadata(ctx, args[0])
			if err != nil {
				return err
			}
			if m.Partitions > 0 {
				st, err := c.PartitionedTopicStats(ctx, args[0], false)
				if err != nil {
					return err
				}
				return a.show(st, func(tw *tabwriter.Writer) {
					writeStats(tw, args[0], m.Partitions, adminapi.TopicStats{
						MsgRateIn: st.MsgRateIn, MsgRateOut: st.MsgRateOut, MsgThroughputIn: st.MsgThroughputIn, MsgThroughputOut: st.MsgThroughputOut,
						MsgInCounter: st.MsgInCounter, MsgOutCounter: st.MsgOutCounter, StorageSize: st.StorageSize, BacklogSize: st.BacklogSize,
						Publishers: st.Publishers, Subscriptions: st.Subscriptions, Replication: st.Replication,
					})
				})
			}
			st, err := c.TopicStats(ctx, args[0])
			if err != nil {
				return err
			}
			return a.show(st, func(tw *tabwriter.Writer) { writeStats(tw, args[0], 0, st) })
		})
	}}
	var perPartition bool
	pstats := &cobra.Command{Use: "partitioned-stats TOPIC", Short: "Show a partitioned topic's stats (JSON)", Args: one, RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			st, err := c.PartitionedTopicStats(ctx, args[0], perPartition)
			if err != nil {
				return err
			}
			return a.showJSON(st)
		})
	}}
	pstats.Flags().BoolVar(&perPartition, "per-partition", false, "include each partition's stats")
	internal := &cobra.Command{Use: "stats-internal TOPIC", Short: "Show the log and cursor state (JSON)", Args: one, RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			st, err := c.InternalStats(ctx, args[0])
			if err != nil {
				return err
			}
			return a.showJSON(st)
		})
	}}
	lastID := &cobra.Command{Use: "last-message-id TOPIC", Short: "Show the last message id", Args: one, RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			id, err := c.LastMessageID(ctx, args[0])
			if err != nil {
				return err
			}
			return a.show(id, func(tw *tabwriter.Writer) { fmt.Fprintf(tw, "%d:%d\n", id.LedgerID, id.EntryID) })
		})
	}}
	var datetime string
	msgID := &cobra.Command{Use: "get-message-id TOPIC", Short: "Find the first message published at or after a time", Args: one, RunE: func(cmd *cobra.Command, args []string) error {
		ts, err := parseWhen(datetime)
		if err != nil {
			return usageErr("--datetime: %v", err)
		}
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			id, err := c.MessageIDByTimestamp(ctx, args[0], ts)
			if err != nil {
				return err
			}
			return a.show(id, func(tw *tabwriter.Writer) { fmt.Fprintf(tw, "%d:%d\n", id.LedgerID, id.EntryID) })
		})
	}}
	msgID.Flags().StringVarP(&datetime, "datetime", "d", "", "RFC 3339 time (2026-01-02T15:04:05Z), or a duration ago (10m)")
	unload := &cobra.Command{Use: "unload TOPIC", Short: "Unload a topic (clients reconnect)", Args: one, RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			if err := c.Unload(ctx, args[0]); err != nil {
				return err
			}
			return a.done("topic %s unloaded", args[0])
		})
	}}
	lookup := &cobra.Command{Use: "lookup TOPIC", Short: "Show the broker serving a topic", Args: one, RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			l, err := c.Lookup(ctx, args[0])
			if err != nil {
				return err
			}
			return a.show(l, func(tw *tabwriter.Writer) { fmt.Fprintf(tw, "brokerUrl\t%s\nhttpUrl\t%s\n", l.BrokerURL, l.HTTPURL) })
		})
	}}
	var clusters string
	setRepl := &cobra.Command{Use: "set-replication-clusters TOPIC", Short: "Override the namespace's replication clusters for one topic", Args: one, RunE: func(cmd *cobra.Command, args []string) error {
		l := splitList(clusters)
		if len(l) == 0 {
			return usageErr("--clusters is required")
		}
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			if err := c.SetTopicPolicy(ctx, "POST", args[0], "replication", nil, l); err != nil {
				return err
			}
			return a.done("replication clusters of %s set to [%s]", args[0], strings.Join(l, ","))
		})
	}}
	setRepl.Flags().StringVarP(&clusters, "clusters", "c", "", "comma-separated cluster names")
	getRepl := &cobra.Command{Use: "get-replication-clusters TOPIC", Short: "Show the topic-level replication clusters", Args: one, RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			var l []string
			if _, err := c.GetTopicPolicy(ctx, args[0], "replication", nil, &l); err != nil {
				return err
			}
			return a.showList(l)
		})
	}}
	rmRepl := &cobra.Command{Use: "remove-replication-clusters TOPIC", Short: "Remove the topic-level override (the namespace's list applies)", Args: one, RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			if err := c.RemoveTopicPolicy(ctx, args[0], "replication", nil); err != nil {
				return err
			}
			return a.done("replication clusters of %s removed", args[0])
		})
	}}
	cmd.AddCommand(list, listPart, create, createPart, update, meta, del, stats, pstats, internal, lastID, msgID, unload, lookup, setRepl, getRepl, rmRepl, topicsTranslateCmd(a))
	cmd.AddCommand(genericPolicyCmds(a, "topic")...)
	cmd.AddCommand(permissionCmds(a, "topic")...)
	// pulsar-admin also has the subscription verbs under topics.
	for _, sc := range subscriptionVerbs(a, true) {
		cmd.AddCommand(sc)
	}
	return cmd
}

// parseWhen reads an RFC 3339 time or a duration before now.
func parseWhen(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, fmt.Errorf("a time is required")
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if secs, err := parseSeconds(s, 1); err == nil {
		// Longer ago than a Duration holds is the earliest a Duration reaches (before any message),
		// not a wrapped, recent time a reset would skip the backlog to.
		longest := int64(math.MaxInt64 / time.Second)
		return time.Now().Add(-time.Duration(max(min(secs, longest), -longest)) * time.Second), nil
	}
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.UnixMilli(ms), nil
	}
	return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a duration", s)
}

func human(n float64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", n/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", n/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", n/(1<<10))
	}
	return fmt.Sprintf("%.0f B", n)
}

// catchUp estimates how long a backlog takes to drain at the current rate.
func catchUp(backlog int64, rate float64) string {
	switch {
	case backlog == 0:
		return "caught up"
	case rate <= 0:
		return "not draining"
	}
	d := time.Duration(math.Ceil(float64(backlog)/rate)) * time.Second
	return "~" + d.String()
}

// writeStats is the people's view of topic stats: traffic, storage, subscriptions, replication.
func writeStats(tw *tabwriter.Writer, topic string, partitions int, st adminapi.TopicStats) {
	fmt.Fprintf(tw, "topic\t%s\n", topic)
	if partitions > 0 {
		fmt.Fprintf(tw, "partitions\t%d\n", partitions)
	}
	fmt.Fprintf(tw, "in\t%.1f msg/s\t%s/s\t%d msgs total\n", st.MsgRateIn, human(st.MsgThroughputIn), st.MsgInCounter)
	fmt.Fprintf(tw, "out\t%.1f msg/s\t%s/s\t%d msgs total\n", st.MsgRateOut, human(st.MsgThroughputOut), st.MsgOutCounter)
	fmt.Fprintf(tw, "storage\t%s\tbacklog %s\n", human(float64(st.StorageSize)), human(float64(st.BacklogSize)))
	fmt.Fprintf(tw, "producers\t%d\n", len(st.Publishers))
	if len(st.Subscriptions) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "SUBSCRIPTION\tTYPE\tCONSUMERS\tBACKLOG\tUNACKED\tRATE OUT\tCATCH-UP")
		names := make([]string, 0, len(st.Subscriptions))
		for n := range st.Subscriptions {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			s := st.Subscriptions[n]
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.1f/s\t%s\n", n, s.Type, len(s.Consumers), s.MsgBacklog, s.UnackedMessages, s.MsgRateOut, catchUp(s.MsgBacklog, s.MsgRateOut))
		}
	}
	if len(st.Replication) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "REPLICATION TO\tCONNECTED\tBACKLOG\tRATE OUT\tDELAY\tCATCH-UP\tLAST ERROR")
		names := make([]string, 0, len(st.Replication))
		for n := range st.Replication {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			r := st.Replication[n]
			lastErr := r.LastError
			if lastErr == "" {
				lastErr = "-"
			}
			eta := catchUp(r.ReplicationBacklog, r.MsgRateOut)
			switch {
			case r.MemoryLimited:
				eta += " (waiting for replication memory)"
			case r.RateLimited:
				eta += " (rate-limited)"
			}
			fmt.Fprintf(tw, "%s\t%t\t%d\t%.1f/s\t%ds\t%s\t%s\n", n, r.Connected, r.ReplicationBacklog, r.MsgRateOut, r.ReplicationDelayInSeconds,
				eta, lastErr)
		}
	}
	if len(st.InboundReplication) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "REPLICATION FROM\tRATE IN\tCONNECTION\tSINCE")
		for _, n := range slices.Sorted(maps.Keys(st.InboundReplication)) {
			in := st.InboundReplication[n]
			fmt.Fprintf(tw, "%s\t%.1f/s\t%s\t%s\n", n, in.MsgRateIn, in.Connection, in.ConnectedSince)
		}
	}
}
