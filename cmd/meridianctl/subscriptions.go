package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/meridian-mq/meridian/adminapi"
)

func subscriptionsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "subscriptions", Short: "Manage a topic's subscriptions"}
	for _, c := range subscriptionVerbs(a, false) {
		cmd.AddCommand(c)
	}
	cmd.AddCommand(subscriptionsSyncPositionCmd(a))
	return cmd
}

// parsePosition reads latest, earliest or ledgerId:entryId[:partition].
func parsePosition(s string) (adminapi.MessageID, error) {
	switch strings.ToLower(s) {
	case "", "latest":
		return adminapi.Latest, nil
	case "earliest":
		return adminapi.Earliest, nil
	}
	return adminapi.ParseMessageID(s)
}

// subscriptionVerbs builds the subscription commands. asTopicVerbs gives pulsar-admin's "topics"
// spelling (topics subscriptions TOPIC, topics create-subscription TOPIC -s SUB, ...); otherwise the
// subscriptions group takes TOPIC SUBSCRIPTION as arguments.
func subscriptionVerbs(a *app, asTopicVerbs bool) []*cobra.Command {
	var sub string
	// args resolves (topic, subscription) from positional args or the -s flag.
	args := func(n int) cobra.PositionalArgs {
		if asTopicVerbs {
			return cobra.ExactArgs(1)
		}
		return cobra.ExactArgs(n)
	}
	names := func(cmd *cobra.Command, argv []string) (string, string, error) {
		if asTopicVerbs {
			if sub == "" {
				return "", "", usageErr("--subscription (-s) is required")
			}
			return argv[0], sub, nil
		}
		return argv[0], argv[1], nil
	}
	verb := func(topicName, subName string) string {
		if asTopicVerbs {
			return topicName
		}
		return subName
	}
	use := func(v string) string {
		if asTopicVerbs {
			return v + " TOPIC"
		}
		return v + " TOPIC SUBSCRIPTION"
	}
	withSub := func(c *cobra.Command) *cobra.Command {
		if asTopicVerbs {
			c.Flags().StringVarP(&sub, "subscription", "s", "", "subscription name")
		}
		return c
	}

	list := &cobra.Command{Use: verb("subscriptions", "list") + " TOPIC", Short: "List a topic's subscriptions", Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, argv []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			l, err := c.ListSubscriptions(ctx, argv[0])
			if err != nil {
				return err
			}
			sort.Strings(l)
			return a.showList(l)
		})
	}}
	var position string
	var replicated bool
	create := withSub(&cobra.Command{Use: use(verb("create-subscription", "create")), Short: "Create a durable subscription", Args: args(2), RunE: func(cmd *cobra.Command, argv []string) error {
		topic, s, err := names(cmd, argv)
		if err != nil {
			return err
		}
		id, err := parsePosition(position)
		if err != nil {
			return usageErr("--position: %v (want latest, earliest or ledgerId:entryId)", err)
		}
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			q := ""
			if replicated {
				q = "?replicated=true"
			}
			p, err := adminapi.TopicRESTPath(topic)
			if err != nil {
				return err
			}
			if _, err := c.Do(ctx, "PUT", "/admin/v2/"+p+"/subscription/"+escapeSegment(s)+q, nil, id, nil); err != nil {
				return err
			}
			return a.done("subscription %s created on %s", s, topic)
		})
	}})
	create.Flags().StringVarP(&position, "position", "m", "latest", "start position: latest, earliest or ledgerId:entryId")
	create.Flags().BoolVar(&replicated, "replicated", false, "mark the subscription replicated")
	var force bool
	del := withSub(&cobra.Command{Use: use(verb("unsubscribe", "delete")), Short: "Delete a subscription", Args: args(2), RunE: func(cmd *cobra.Command, argv []string) error {
		topic, s, err := names(cmd, argv)
		if err != nil {
			return err
		}
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			if err := c.DeleteSubscription(ctx, topic, s, force); err != nil {
				return err
			}
			return a.done("subscription %s deleted from %s", s, topic)
		})
	}})
	del.Flags().BoolVarP(&force, "force", "f", false, "disconnect its consumers first")
	var when, msgID string
	reset := withSub(&cobra.Command{Use: use("reset-cursor"), Short: "Move a subscription to a time or message id", Args: args(2), RunE: func(cmd *cobra.Command, argv []string) error {
		topic, s, err := names(cmd, argv)
		if err != nil {
			return err
		}
		if (when == "") == (msgID == "") {
			return usageErr("give exactly one of --time or --message-id")
		}
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			if msgID != "" {
				id, err := parsePosition(msgID)
				if err != nil {
					return usageErr("--message-id: %v", err)
				}
				if err := c.ResetCursor(ctx, topic, s, id); err != nil {
					return err
				}
			} else {
				ts, err := parseWhen(when)
				if err != nil {
					return usageErr("--time: %v", err)
				}
				if err := c.ResetCursorToTime(ctx, topic, s, ts); err != nil {
					return err
				}
			}
			return a.done("subscription %s of %s reset", s, topic)
		})
	}})
	reset.Flags().StringVarP(&when, "time", "t", "", "RFC 3339 time, or a duration ago (e.g. 10m)")
	reset.Flags().StringVar(&msgID, "message-id", "", "ledgerId:entryId[:partition], earliest or latest")
	var n int64
	skip := withSub(&cobra.Command{Use: use("skip"), Short: "Skip messages of a subscription's backlog", Args: args(2), RunE: func(cmd *cobra.Command, argv []string) error {
		topic, s, err := names(cmd, argv)
		if err != nil {
			return err
		}
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			if err := c.SkipMessages(ctx, topic, s, n); err != nil {
				return err
			}
			return a.done("skipped %d messages of %s on %s", n, s, topic)
		})
	}})
	skip.Flags().Int64VarP(&n, "count", "n", 1, "number of messages")
	clear := withSub(&cobra.Command{Use: use("clear-backlog"), Short: "Skip a subscription's whole backlog", Args: args(2), RunE: func(cmd *cobra.Command, argv []string) error {
		topic, s, err := names(cmd, argv)
		if err != nil {
			return err
		}
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			if err := c.ClearBacklog(ctx, topic, s); err != nil {
				return err
			}
			return a.done("backlog of %s on %s cleared", s, topic)
		})
	}})
	var expire string
	exp := withSub(&cobra.Command{Use: use("expire-messages"), Short: "Acknowledge messages older than a time", Args: args(2), RunE: func(cmd *cobra.Command, argv []string) error {
		topic, s, err := names(cmd, argv)
		if err != nil {
			return err
		}
		secs, err := parseSeconds(expire, 1)
		if err != nil {
			return usageErr("--expire-time: %v", err)
		}
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			if err := c.ExpireMessages(ctx, topic, s, secs); err != nil {
				return err
			}
			return a.done("messages of %s on %s older than %s expired", s, topic, time.Duration(secs)*time.Second)
		})
	}})
	exp.Flags().StringVarP(&expire, "expire-time", "t", "", "age, e.g. 3600 or 1h")
	var count int
	peek := withSub(&cobra.Command{Use: use(verb("peek-messages", "peek")), Short: "Show the next messages of a subscription's backlog without consuming them", Args: args(2), RunE: func(cmd *cobra.Command, argv []string) error {
		topic, s, err := names(cmd, argv)
		if err != nil {
			return err
		}
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			var msgs []adminapi.RawMessage
			for i := 1; i <= count; i++ {
				m, err := c.PeekMessage(ctx, topic, s, i)
				if adminapi.IsStatus(err, 404) && i > 1 {
					break
				}
				if err != nil {
					return err
				}
				msgs = append(msgs, m)
			}
			return a.show(msgs, func(tw *tabwriter.Writer) {
				for _, m := range msgs {
					fmt.Fprintf(tw, "message id\t%d:%d\n", m.ID.LedgerID, m.ID.EntryID)
					if m.PublishTime > 0 {
						fmt.Fprintf(tw, "publish time\t%s\n", time.UnixMilli(m.PublishTime).UTC().Format(time.RFC3339Nano))
					}
					if len(m.Properties) > 0 {
						fmt.Fprintf(tw, "properties\t%v\n", m.Properties)
					}
					if m.Batched {
						fmt.Fprintf(tw, "batch\t%d messages\n", m.NumBatchMessages)
					}
					fmt.Fprintf(tw, "payload\t%q\n\n", m.Payload)
				}
			})
		})
	}})
	peek.Flags().IntVarP(&count, "count", "n", 1, "number of messages")
	return []*cobra.Command{list, create, del, reset, skip, clear, exp, peek}
}
