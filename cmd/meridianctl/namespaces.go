package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/meridian-mq/meridian/adminapi"
)

// parseMinutes reads pulsar-admin's time syntax (30m, 3h, 2d, 5w, or plain minutes; -1 = infinite).
func parseMinutes(s string) (int, error) {
	if s == "-1" {
		return -1, nil
	}
	secs, err := parseSeconds(s, 60)
	if err != nil {
		return 0, err
	}
	return int(secs / 60), nil
}

// parseSeconds reads 10s, 5m, 3h, 2d, 1w or a plain number of units (unit seconds).
func parseSeconds(s string, unit int64) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("empty time")
	}
	mult := map[byte]int64{'s': 1, 'm': 60, 'h': 3600, 'd': 86400, 'w': 7 * 86400}
	if m, ok := mult[s[len(s)-1]]; ok {
		n, err := strconv.ParseInt(s[:len(s)-1], 10, 64)
		if err != nil || n < 0 || !fitsTimes(n, m) {
			return 0, fmt.Errorf("invalid time %q: want e.g. 30s, 10m, 3h, 2d, 1w", s)
		}
		return n * m, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || !fitsTimes(n, unit) {
		return 0, fmt.Errorf("invalid time %q: want e.g. 30s, 10m, 3h, 2d, 1w", s)
	}
	return n * unit, nil
}

// fitsTimes reports whether n*m (m > 0) fits an int64: a product that wrapped would be sent as a
// small time or size the broker accepts (16777216T was 0 bytes).
func fitsTimes(n, m int64) bool {
	return n <= math.MaxInt64/m && n >= math.MinInt64/m
}

// parseBytes reads sizes like 512, 10K, 100M, 16G, 1T (-1 = unlimited).
func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(strings.ToUpper(s))
	if s == "-1" {
		return -1, nil
	}
	s = strings.TrimSuffix(s, "B")
	mult := map[byte]int64{'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30, 'T': 1 << 40}
	if s != "" {
		if m, ok := mult[s[len(s)-1]]; ok {
			n, err := strconv.ParseInt(s[:len(s)-1], 10, 64)
			if err != nil || n < 0 || !fitsTimes(n, m) {
				return 0, fmt.Errorf("invalid size %q: want e.g. 512M, 10G", s)
			}
			return n * m, nil
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("invalid size %q: want e.g. 512M, 10G", s)
	}
	return n, nil
}

// policyCmds builds get-/set-/remove- commands for a simple namespace policy endpoint.
type nsPolicyCmd struct {
	name     string // CLI suffix, e.g. "message-ttl"
	endpoint string // REST path segment, e.g. "messageTTL"
	method   string // write method
	short    string
	value    func(cmd *cobra.Command) (any, error)
	flags    func(cmd *cobra.Command)
	noRemove bool
}

func namespacesCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "namespaces", Short: "Manage namespaces and their policies"}
	nsArg := cobra.ExactArgs(1)

	list := &cobra.Command{Use: "list TENANT", Short: "List a tenant's namespaces", Args: nsArg, RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			l, err := c.ListNamespaces(ctx, args[0])
			if err != nil {
				return err
			}
			return a.showList(l)
		})
	}}
	var createClusters string
	create := &cobra.Command{Use: "create TENANT/NAMESPACE", Short: "Create a namespace (replicated to --clusters, default: the serving cluster)", Args: nsArg, RunE: func(cmd *cobra.Command, args []string) error {
		var p *adminapi.Policies
		if cl := splitList(createClusters); len(cl) > 0 {
			pol := adminapi.NewPolicies()
			pol.ReplicationClusters = cl
			p = &pol
		}
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			if err := c.CreateNamespace(ctx, args[0], p); err != nil {
				return err
			}
			return a.done("namespace %s created", args[0])
		})
	}}
	create.Flags().StringVarP(&createClusters, "clusters", "c", "", "comma-separated replication clusters")
	var force bool
	del := &cobra.Command{Use: "delete TENANT/NAMESPACE", Short: "Delete a namespace", Args: nsArg, RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			if err := c.DeleteNamespace(ctx, args[0], force); err != nil {
				return err
			}
			return a.done("namespace %s deleted", args[0])
		})
	}}
	del.Flags().BoolVarP(&force, "force", "f", false, "delete its topics too")
	policies := &cobra.Command{Use: "policies TENANT/NAMESPACE", Short: "Show all policies of a namespace (JSON)", Args: nsArg, RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			p, err := c.GetPolicies(ctx, args[0])
			if err != nil {
				return err
			}
			return a.showJSON(p)
		})
	}}
	topics := &cobra.Command{Use: "topics TENANT/NAMESPACE", Short: "List the topics of a namespace", Args: nsArg, RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			l, err := c.ListNamespaceTopics(ctx, args[0])
			if err != nil {
				return err
			}
			return a.showList(l)
		})
	}}
	var clusters string
	setClusters := &cobra.Command{Use: "set-clusters TENANT/NAMESPACE", Short: "Set the clusters a namespace replicates between", Args: nsArg, RunE: func(cmd *cobra.Command, args []string) error {
		l := splitList(clusters)
		if len(l) == 0 {
			return usageErr("--clusters is required, e.g. --clusters east,west")
		}
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			if err := c.SetReplicationClusters(ctx, args[0], l); err != nil {
				return err
			}
			return a.done("replication clusters of %s set to [%s]", args[0], strings.Join(l, ","))
		})
	}}
	setClusters.Flags().StringVarP(&clusters, "clusters", "c", "", "comma-separated cluster names")
	getClusters := &cobra.Command{Use: "get-clusters TENANT/NAMESPACE", Short: "Show the clusters a namespace replicates between", Args: nsArg, RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			l, err := c.GetReplicationClusters(ctx, args[0])
			if err != nil {
				return err
			}
			return a.showList(l)
		})
	}}
	unload := &cobra.Command{Use: "unload TENANT/NAMESPACE", Short: "Unload all topics of a namespace", Args: nsArg, RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			if err := c.SetNamespacePolicy(ctx, http.MethodPut, args[0], "unload", nil, nil); err != nil {
				return err
			}
			return a.done("namespace %s unloaded", args[0])
		})
	}}
	cmd.AddCommand(list, create, del, policies, topics, setClusters, getClusters, unload, replicationStatusCmd(a))
	cmd.AddCommand(backlogQuotaCmds(a)...)
	cmd.AddCommand(genericPolicyCmds(a, "namespace")...)
	cmd.AddCommand(permissionCmds(a, "namespace")...)

	var (
		ttl, retTime, retSize, expTime string
		enable, disable                bool
		msgRate, byteRate, period      int64
		autoType                       string
		autoPartitions                 int
		strategy                       string
	)
	rateFlags := func(c *cobra.Command) {
		c.Flags().Int64Var(&msgRate, "msg-dispatch-rate", -1, "messages per period (-1 = unlimited)")
		c.Flags().Int64Var(&byteRate, "byte-dispatch-rate", -1, "bytes per period (-1 = unlimited)")
		c.Flags().Int64Var(&period, "dispatch-rate-period", 1, "period in seconds")
	}
	rate := func(*cobra.Command) (any, error) {
		return adminapi.DispatchRate{DispatchThrottlingRateInMsg: int(msgRate), DispatchThrottlingRateInByte: byteRate, RatePeriodInSecond: int(period)}, nil
	}
	enableFlags := func(c *cobra.Command) {
		c.Flags().BoolVarP(&enable, "enable", "e", false, "enable")
		c.Flags().BoolVarP(&disable, "disable", "d", false, "disable")
	}
	enabled := func() (bool, error) {
		if enable == disable {
			return false, usageErr("give exactly one of --enable or --disable")
		}
		return enable, nil
	}
	for _, p := range []nsPolicyCmd{
		{name: "message-ttl", endpoint: "messageTTL", method: http.MethodPost, short: "message time to live",
			flags: func(c *cobra.Command) { c.Flags().StringVarP(&ttl, "ttl", "t", "", "TTL, e.g. 3600, 1h, 7d") },
			value: func(*cobra.Command) (any, error) {
				s, err := parseSeconds(ttl, 1)
				if err != nil {
					return nil, usageErr("--ttl: %v", err)
				}
				return s, nil
			}},
		{name: "retention", endpoint: "retention", method: http.MethodPost, short: "retention of acknowledged messages",
			flags: func(c *cobra.Command) {
				c.Flags().StringVarP(&retTime, "time", "t", "", "retention time, e.g. 100m, 3h, 2d, 5w, -1 for infinite")
				c.Flags().StringVarP(&retSize, "size", "s", "", "retention size, e.g. 10M, 16G, -1 for infinite")
			},
			value: func(*cobra.Command) (any, error) {
				m, err := parseMinutes(retTime)
				if err != nil {
					return nil, usageErr("--time: %v", err)
				}
				b, err := parseBytes(retSize)
				if err != nil {
					return nil, usageErr("--size: %v", err)
				}
				mb := b
				if b > 0 {
					mb = b >> 20
				}
				return adminapi.RetentionPolicies{RetentionTimeInMinutes: m, RetentionSizeInMB: mb}, nil
			}},
		{name: "deduplication", endpoint: "deduplication", method: http.MethodPost, short: "producer deduplication",
			flags: enableFlags, value: func(*cobra.Command) (any, error) { return enabled() }},
		{name: "replicator-dispatch-rate", endpoint: "replicatorDispatchRate", method: http.MethodPost, short: "replication rate limit (this cluster's outbound)",
			flags: rateFlags, value: rate},
		{name: "dispatch-rate", endpoint: "dispatchRate", method: http.MethodPost, short: "per-topic dispatch rate limit", flags: rateFlags, value: rate},
		{name: "subscription-dispatch-rate", endpoint: "subscriptionDispatchRate", method: http.MethodPost, short: "per-subscription dispatch rate limit", flags: rateFlags, value: rate},
		{name: "auto-topic-creation", endpoint: "autoTopicCreation", method: http.MethodPost, short: "automatic topic creation",
			flags: func(c *cobra.Command) {
				enableFlags(c)
				c.Flags().StringVarP(&autoType, "type", "t", "non-partitioned", "partitioned or non-partitioned")
				c.Flags().IntVarP(&autoPartitions, "num-partitions", "n", 0, "partitions of auto-created partitioned topics")
			},
			value: func(cmd *cobra.Command) (any, error) {
				on, err := enabled()
				if err != nil {
					return nil, err
				}
				o := adminapi.AutoTopicCreationOverride{AllowAutoTopicCreation: on}
				if on {
					o.TopicType = autoType
					if autoType == adminapi.TopicTypePartitioned {
						n := autoPartitions
						o.DefaultNumPartitions = &n
					}
				}
				return o, nil
			}},
		{name: "subscription-expiration-time", endpoint: "subscriptionExpirationTime", method: http.MethodPost, short: "expiry of inactive subscriptions",
			flags: func(c *cobra.Command) { c.Flags().StringVarP(&expTime, "time", "t", "", "minutes, or e.g. 3h, 2d") },
			value: func(*cobra.Command) (any, error) { return parseMinutes(expTime) }},
		{name: "schema-compatibility-strategy", endpoint: "schemaCompatibilityStrategy", method: http.MethodPut, short: "schema compatibility strategy", noRemove: true,
			flags: func(c *cobra.Command) {
				c.Flags().StringVar(&strategy, "compatibility", "", "e.g. FULL, BACKWARD, ALWAYS_COMPATIBLE")
			},
			value: func(*cobra.Command) (any, error) { return strings.ToUpper(strategy), nil }},
	} {
		cmd.AddCommand(nsPolicyCommands(a, p)...)
	}
	return cmd
}

func nsPolicyCommands(a *app, p nsPolicyCmd) []*cobra.Command {
	set := &cobra.Command{Use: "set-" + p.name + " TENANT/NAMESPACE", Short: "Set the " + p.short, Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
		v, err := p.value(cmd)
		if err != nil {
			return err
		}
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			if err := c.SetNamespacePolicy(ctx, p.method, args[0], p.endpoint, nil, v); err != nil {
				return err
			}
			return a.done("%s of %s set", p.name, args[0])
		})
	}}
	if p.flags != nil {
		p.flags(set)
	}
	get := &cobra.Command{Use: "get-" + p.name + " TENANT/NAMESPACE", Short: "Show the " + p.short, Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			var v json.RawMessage
			if p.endpoint == "deduplication" {
				pol, err := c.GetPolicies(ctx, args[0])
				if err != nil {
					return err
				}
				return showValue(a, pol.DeduplicationEnabled != nil, pol.DeduplicationEnabled)
			}
			set, err := c.GetNamespacePolicy(ctx, args[0], p.endpoint, nil, &v)
			if err != nil {
				return err
			}
			return showValue(a, set, v)
		})
	}}
	out := []*cobra.Command{set, get}
	if !p.noRemove {
		out = append(out, &cobra.Command{Use: "remove-" + p.name + " TENANT/NAMESPACE", Short: "Remove the " + p.short + " (inherit the broker default)", Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
			return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
				if err := c.RemoveNamespacePolicy(ctx, args[0], p.endpoint, nil); err != nil {
					return err
				}
				return a.done("%s of %s removed", p.name, args[0])
			})
		}})
	}
	return out
}

// showValue prints a policy value, or "(not set)" (JSON null) when unset.
func showValue(a *app, set bool, v any) error {
	if !set {
		if a.output == "json" {
			_, err := fmt.Fprintln(a.out, "null")
			return err
		}
		_, err := fmt.Fprintln(a.out, "(not set)")
		return err
	}
	return a.showJSON(v)
}

func backlogQuotaCmds(a *app) []*cobra.Command {
	var limitSize, limitTime, policy, typ string
	set := &cobra.Command{Use: "set-backlog-quota TENANT/NAMESPACE", Short: "Set a backlog quota (bounds disk while a consumer or remote cluster lags)", Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
		q := adminapi.BacklogQuota{Policy: policy, LimitSize: -1, LimitTime: -1}
		if limitSize != "" {
			n, err := parseBytes(limitSize)
			if err != nil {
				return usageErr("--limit-size: %v", err)
			}
			q.LimitSize = n
		}
		if limitTime != "" {
			n, err := parseSeconds(limitTime, 1)
			if err != nil {
				return usageErr("--limit-time: %v", err)
			}
			q.LimitTime = n
		}
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			if err := c.SetNamespacePolicy(ctx, http.MethodPost, args[0], "backlogQuota", url.Values{"backlogQuotaType": {typ}}, q); err != nil {
				return err
			}
			return a.done("backlog quota (%s) of %s set", typ, args[0])
		})
	}}
	set.Flags().StringVarP(&limitSize, "limit-size", "l", "", "size limit, e.g. 10G")
	set.Flags().StringVar(&limitTime, "limit-time", "", "age limit, e.g. 1h")
	set.Flags().StringVarP(&policy, "policy", "p", adminapi.BacklogPolicyProducerRequestHold, "producer_request_hold, producer_exception or consumer_backlog_eviction")
	set.Flags().StringVarP(&typ, "type", "t", adminapi.BacklogQuotaDestinationStorage, "destination_storage or message_age")
	get := &cobra.Command{Use: "get-backlog-quotas TENANT/NAMESPACE", Short: "Show the backlog quotas", Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			var m map[string]adminapi.BacklogQuota
			if _, err := c.GetNamespacePolicy(ctx, args[0], "backlogQuotaMap", nil, &m); err != nil {
				return err
			}
			return a.show(m, func(tw *tabwriter.Writer) {
				fmt.Fprintln(tw, "TYPE\tLIMIT SIZE\tLIMIT TIME\tPOLICY")
				keys := make([]string, 0, len(m))
				for k := range m {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				for _, k := range keys {
					q := m[k]
					fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", k, q.LimitSize, q.LimitTime, q.Policy)
				}
			})
		})
	}}
	var rmType string
	remove := &cobra.Command{Use: "remove-backlog-quota TENANT/NAMESPACE", Short: "Remove a backlog quota", Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			if err := c.RemoveNamespacePolicy(ctx, args[0], "backlogQuota", url.Values{"backlogQuotaType": {rmType}}); err != nil {
				return err
			}
			return a.done("backlog quota (%s) of %s removed", rmType, args[0])
		})
	}}
	remove.Flags().StringVarP(&rmType, "type", "t", adminapi.BacklogQuotaDestinationStorage, "destination_storage or message_age")
	return []*cobra.Command{set, get, remove}
}

// genericPolicyCmds reach every policy endpoint by its REST name, for policies without a dedicated
// command: get-policy NAME POLICY, set-policy NAME POLICY JSON [--method PUT], remove-policy NAME POLICY.
func genericPolicyCmds(a *app, kind string) []*cobra.Command {
	argName := "TENANT/NAMESPACE"
	if kind == "topic" {
		argName = "TOPIC"
	}
	get := func(ctx context.Context, c *adminapi.Client, name, policy string, q url.Values, out any) (bool, error) {
		if kind == "topic" {
			return c.GetTopicPolicy(ctx, name, policy, q, out)
		}
		return c.GetNamespacePolicy(ctx, name, policy, q, out)
	}
	var applied bool
	getCmd := &cobra.Command{Use: "get-policy " + argName + " POLICY", Short: "Show any " + kind + " policy by its REST name (e.g. maxProducersPerTopic)", Args: cobra.ExactArgs(2), RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			var q url.Values
			if applied {
				q = url.Values{"applied": {"true"}}
			}
			var v json.RawMessage
			set, err := get(ctx, c, args[0], args[1], q, &v)
			if err != nil {
				return err
			}
			return showValue(a, set, v)
		})
	}}
	if kind == "topic" {
		getCmd.Flags().BoolVar(&applied, "applied", false, "show the value in force (topic, else namespace)")
	}
	var method string
	setCmd := &cobra.Command{Use: "set-policy " + argName + " POLICY JSON", Short: "Set any " + kind + " policy by its REST name to a JSON value", Args: cobra.ExactArgs(3), RunE: func(cmd *cobra.Command, args []string) error {
		if !json.Valid([]byte(args[2])) {
			return usageErr("the value must be JSON, e.g. 100, true, '\"FULL\"' or '{\"retentionTimeInMinutes\":60,\"retentionSizeInMB\":-1}'")
		}
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			var err error
			if kind == "topic" {
				err = c.SetTopicPolicy(ctx, strings.ToUpper(method), args[0], args[1], nil, []byte(args[2]))
			} else {
				err = c.SetNamespacePolicy(ctx, strings.ToUpper(method), args[0], args[1], nil, []byte(args[2]))
			}
			if err != nil {
				return err
			}
			return a.done("%s of %s set", args[1], args[0])
		})
	}}
	setCmd.Flags().StringVar(&method, "method", "POST", "HTTP method of the endpoint (Pulsar uses PUT for a few)")
	rmCmd := &cobra.Command{Use: "remove-policy " + argName + " POLICY", Short: "Remove any " + kind + " policy by its REST name", Args: cobra.ExactArgs(2), RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			var err error
			if kind == "topic" {
				err = c.RemoveTopicPolicy(ctx, args[0], args[1], nil)
			} else {
				err = c.RemoveNamespacePolicy(ctx, args[0], args[1], nil)
			}
			if err != nil {
				return err
			}
			return a.done("%s of %s removed", args[1], args[0])
		})
	}}
	return []*cobra.Command{getCmd, setCmd, rmCmd}
}
