package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/meridian-mq/meridian/adminapi"
)

// Position translation between clusters (docs/geo-replication.md, "Moving a subscription that is
// not replicated"): the target cluster maps a position of the source through its inbound index.

// clusterAdmin returns an admin client for a cluster, by its registered serviceUrl.
func clusterAdmin(ctx context.Context, a *app, name string) (*adminapi.Client, error) {
	api, err := a.api()
	if err != nil {
		return nil, err
	}
	data, err := withStepTimeout(ctx, a.timeout, func(ctx context.Context) (adminapi.ClusterData, error) { return api.GetCluster(ctx, name) })
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", name, err)
	}
	if data.ServiceURL == "" {
		return nil, fmt.Errorf("cluster %s has no serviceUrl registered", name)
	}
	c, err := adminapi.NewClient(data.ServiceURL, &http.Client{Timeout: a.timeout})
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", name, err)
	}
	c.UserAgent = "meridianctl"
	return c, nil
}

// translation is what both commands print.
type translation struct {
	From string `json:"from"`
	To   string `json:"to"`
	adminapi.PositionTranslation
	// SourcePublishTime is the publish time of the source message, when it was read (the
	// fallback's input).
	SourcePublishTime int64 `json:"sourcePublishTime,omitempty"`
}

func writeTranslation(tw *tabwriter.Writer, t translation) {
	exact := "exact"
	if !t.Exact {
		exact = "approximate"
	}
	fmt.Fprintf(tw, "on %s\t%d:%d\t(%s, %s)\n", t.To, t.MessageID.LedgerID, t.MessageID.EntryID, t.Method, exact)
	if t.OriginMessageID != nil && t.Method == "index-at-or-before" {
		fmt.Fprintf(tw, "mapped from %s\t%d:%d\t(the last message of %s at or before it that reached %s)\n", t.From,
			t.OriginMessageID.LedgerID, t.OriginMessageID.EntryID, t.From, t.To)
	}
}

func topicsTranslateCmd(a *app) *cobra.Command {
	var from, to, id, when string
	var atOrBefore bool
	cmd := &cobra.Command{
		Use:   "translate TOPIC --from a --to b (--message-id L:E | --publish-time T)",
		Short: "Map a message id or a publish time on one cluster to the matching position on another",
		Long: `Asks cluster --to for the position of cluster --from's message --message-id, through its inbound
replication index (exact). With --at-or-before, a position that did not reach --to itself maps to the
last one of --from before it that did. When the index has no answer, the message's publish time
(read from --from) gives the first message on --to published at or after it: approximate, and said
so. --publish-time alone answers by time.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if from == "" || to == "" {
				return usageErr("--from and --to are required")
			}
			if (id == "") == (when == "") {
				return usageErr("give one of --message-id and --publish-time")
			}
			ctx := cmd.Context()
			target, err := clusterAdmin(ctx, a, to)
			if err != nil {
				return err
			}
			out := translation{From: from, To: to}
			var idp *adminapi.MessageID
			var ts time.Time
			if when != "" {
				if ts, err = parseWhen(when); err != nil {
					return usageErr("--publish-time: %v", err)
				}
			} else {
				m, err := adminapi.ParseMessageID(id)
				if err != nil {
					return usageErr("--message-id: %v", err)
				}
				idp = &m
				// The publish time on the source is the fallback when the index has no answer.
				if source, err := clusterAdmin(ctx, a, from); err == nil {
					if msg, err := withStepTimeout(ctx, a.timeout, func(ctx context.Context) (adminapi.RawMessage, error) {
						return source.GetMessageByID(ctx, args[0], m.LedgerID, m.EntryID)
					}); err == nil && msg.PublishTime > 0 {
						ts, out.SourcePublishTime = time.UnixMilli(msg.PublishTime), msg.PublishTime
					}
				}
			}
			res, err := withStepTimeout(ctx, a.timeout, func(ctx context.Context) (adminapi.PositionTranslation, error) {
				return target.TranslatePosition(ctx, args[0], from, idp, atOrBefore, ts)
			})
			if err != nil {
				return err
			}
			out.PositionTranslation = res
			return a.show(out, func(tw *tabwriter.Writer) { writeTranslation(tw, out) })
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the cluster the message id or time is from")
	cmd.Flags().StringVar(&to, "to", "", "the cluster to find the position on")
	cmd.Flags().StringVar(&id, "message-id", "", "ledger:entry on --from")
	cmd.Flags().StringVar(&when, "publish-time", "", "RFC 3339 time, or a duration ago (10m)")
	cmd.Flags().BoolVar(&atOrBefore, "at-or-before", false, "map a message that did not reach --to to the last one before it that did")
	return cmd
}

// errNothingMapped: sync-position found no position to move to.
var errNothingMapped = errors.New("no position to move to")

func subscriptionsSyncPositionCmd(a *app) *cobra.Command {
	var from, to string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "sync-position TOPIC SUBSCRIPTION --from a --to b",
		Short: "Set a subscription on --to to the translated position of the same subscription on --from",
		Long: `For a subscription that is not replicated: reads its mark-delete position on --from, maps it to --to
(the last message of --from at or before it that reached --to, through --to's inbound replication
index) and resets the subscription on --to just after it, so that it next receives what it had not
consumed on --from. Messages written on --to itself or on a third cluster are not accounted for:
replicated subscriptions carry those too. When the index has no answer, the publish time of the
first message the subscription had not consumed on --from gives an approximate position, and the
output says so. --dry-run prints the position without changing anything. The subscription must not
have consumers connected on --to.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if from == "" || to == "" {
				return usageErr("--from and --to are required")
			}
			topic, sub := args[0], args[1]
			ctx := cmd.Context()
			source, err := clusterAdmin(ctx, a, from)
			if err != nil {
				return err
			}
			target, err := clusterAdmin(ctx, a, to)
			if err != nil {
				return err
			}
			stats, err := withStepTimeout(ctx, a.timeout, func(ctx context.Context) (adminapi.PersistentTopicInternalStats, error) {
				return source.InternalStats(ctx, topic)
			})
			if err != nil {
				return fmt.Errorf("%s: %w", from, err)
			}
			cursor, found := stats.Cursors[sub]
			if !found {
				return fmt.Errorf("%s: %s has no subscription %q", from, topic, sub)
			}
			md, err := adminapi.ParseMessageID(cursor.MarkDeletePosition)
			if err != nil {
				return fmt.Errorf("%s: mark-delete position %q: %w", from, cursor.MarkDeletePosition, err)
			}
			out := translation{From: from, To: to}
			// The fallback: the first message the subscription had not consumed on the source.
			var ts time.Time
			if first, err := withStepTimeout(ctx, a.timeout, func(ctx context.Context) (adminapi.RawMessage, error) {
				return source.PeekMessage(ctx, topic, sub, 1)
			}); err == nil && first.PublishTime > 0 {
				ts, out.SourcePublishTime = time.UnixMilli(first.PublishTime), first.PublishTime
			}
			res, err := withStepTimeout(ctx, a.timeout, func(ctx context.Context) (adminapi.PositionTranslation, error) {
				return target.TranslatePosition(ctx, topic, from, &md, true, ts)
			})
			var apiErr *adminapi.Error
			if errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusNotFound {
				return fmt.Errorf("%w: nothing of %s at or before %s reached %s, and the subscription has nothing left to consume on %s to date it by",
					errNothingMapped, from, cursor.MarkDeletePosition, to, from)
			}
			if err != nil {
				return err
			}
			out.PositionTranslation = res
			reset := res.MessageID
			if res.Method != "publish-time" {
				reset.EntryID++ // just after the last message consumed
			}
			if !dryRun {
				if err := withStepTimeout0(ctx, a.timeout, func(ctx context.Context) error { return target.ResetCursor(ctx, topic, sub, reset) }); err != nil {
					return fmt.Errorf("%s: reset %s to %d:%d: %w", to, sub, reset.LedgerID, reset.EntryID, err)
				}
			}
			return a.show(out, func(tw *tabwriter.Writer) {
				writeTranslation(tw, out)
				verb := "reset"
				if dryRun {
					verb = "would reset"
				}
				fmt.Fprintf(tw, "%s %s on %s\tto %d:%d\t(next message to receive)\n", verb, sub, to, reset.LedgerID, reset.EntryID)
			})
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the cluster whose subscription position is copied")
	cmd.Flags().StringVar(&to, "to", "", "the cluster whose subscription is moved")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the position without resetting the subscription")
	return cmd
}

// withStepTimeout0 is withStepTimeout for steps without a value.
func withStepTimeout0(ctx context.Context, d time.Duration, fn func(context.Context) error) error {
	_, err := withStepTimeout(ctx, d, func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx) })
	return err
}
