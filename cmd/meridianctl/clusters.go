package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/meridian-mq/meridian/adminapi"
)

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func clustersCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "clusters", Short: "Register and inspect clusters (geo-replication peers)"}

	var data adminapi.ClusterData
	var peers string
	addFlags := func(c *cobra.Command) {
		f := c.Flags()
		f.StringVar(&data.ServiceURL, "url", "", "admin REST URL of the cluster, http://host:8080")
		f.StringVar(&data.ServiceURLTLS, "url-secure", "", "admin REST URL over TLS, https://host:8443")
		f.StringVar(&data.BrokerServiceURL, "broker-url", "", "binary protocol URL, pulsar://host:6650")
		f.StringVar(&data.BrokerServiceURLTLS, "broker-url-secure", "", "binary protocol URL over TLS, pulsar+ssl://host:6651")
		f.StringVar(&peers, "peer-clusters", "", "comma-separated peer cluster names")
	}

	list := &cobra.Command{Use: "list", Short: "List clusters", Args: cobra.NoArgs, RunE: func(cmd *cobra.Command, _ []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			l, err := c.ListClusters(ctx)
			if err != nil {
				return err
			}
			return a.showList(l)
		})
	}}
	get := &cobra.Command{Use: "get CLUSTER", Short: "Show a cluster", Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			d, err := c.GetCluster(ctx, args[0])
			if err != nil {
				return err
			}
			return a.show(d, func(tw *tabwriter.Writer) {
				fmt.Fprintf(tw, "name\t%s\n", args[0])
				fmt.Fprintf(tw, "serviceUrl\t%s\n", d.ServiceURL)
				fmt.Fprintf(tw, "brokerServiceUrl\t%s\n", d.BrokerServiceURL)
				if d.ServiceURLTLS != "" || d.BrokerServiceURLTLS != "" {
					fmt.Fprintf(tw, "serviceUrlTls\t%s\n", d.ServiceURLTLS)
					fmt.Fprintf(tw, "brokerServiceUrlTls\t%s\n", d.BrokerServiceURLTLS)
				}
				fmt.Fprintf(tw, "peerClusterNames\t%s\n", strings.Join(d.PeerClusterNames, ","))
			})
		})
	}}
	create := &cobra.Command{Use: "create CLUSTER", Short: "Register a cluster", Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
		if data.ServiceURL == "" && data.BrokerServiceURL == "" {
			return usageErr("give at least --url or --broker-url")
		}
		data.PeerClusterNames = splitList(peers)
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			if err := c.CreateCluster(ctx, args[0], data); err != nil {
				return err
			}
			return a.done("cluster %s created", args[0])
		})
	}}
	addFlags(create)
	update := &cobra.Command{Use: "update CLUSTER", Short: "Change a cluster's URLs (flags not given keep their value)", Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			cur, err := c.GetCluster(ctx, args[0])
			if err != nil {
				return err
			}
			f := cmd.Flags()
			if f.Changed("url") {
				cur.ServiceURL = data.ServiceURL
			}
			if f.Changed("url-secure") {
				cur.ServiceURLTLS = data.ServiceURLTLS
			}
			if f.Changed("broker-url") {
				cur.BrokerServiceURL = data.BrokerServiceURL
			}
			if f.Changed("broker-url-secure") {
				cur.BrokerServiceURLTLS = data.BrokerServiceURLTLS
			}
			if f.Changed("peer-clusters") {
				cur.PeerClusterNames = splitList(peers)
			}
			if err := c.UpdateCluster(ctx, args[0], cur); err != nil {
				return err
			}
			return a.done("cluster %s updated", args[0])
		})
	}}
	addFlags(update)
	del := &cobra.Command{Use: "delete CLUSTER", Short: "Unregister a cluster (refused while tenants or namespaces use it)", Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			if err := c.DeleteCluster(ctx, args[0]); err != nil {
				return err
			}
			return a.done("cluster %s deleted", args[0])
		})
	}}
	getPeers := &cobra.Command{Use: "get-peer-clusters CLUSTER", Short: "List a cluster's peer clusters", Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			var l []string
			if _, err := c.Do(ctx, "GET", "/admin/v2/clusters/"+escapeSegment(args[0])+"/peers", nil, nil, &l); err != nil {
				return err
			}
			return a.showList(l)
		})
	}}
	var peerList string
	updatePeers := &cobra.Command{Use: "update-peer-clusters CLUSTER", Short: "Set a cluster's peer clusters", Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			l := splitList(peerList)
			if l == nil {
				l = []string{}
			}
			if _, err := c.Do(ctx, "POST", "/admin/v2/clusters/"+escapeSegment(args[0])+"/peers", nil, l, nil); err != nil {
				return err
			}
			return a.done("peer clusters of %s set to [%s]", args[0], strings.Join(l, ","))
		})
	}}
	updatePeers.Flags().StringVar(&peerList, "peer-clusters", "", "comma-separated peer cluster names")
	cmd.AddCommand(list, get, create, update, del, getPeers, updatePeers)
	return cmd
}

func tenantsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "tenants", Short: "Manage tenants and the clusters they may use"}
	var allowed, roles string
	addFlags := func(c *cobra.Command) {
		c.Flags().StringVarP(&allowed, "allowed-clusters", "c", "", "comma-separated clusters the tenant may use and replicate between")
		c.Flags().StringVarP(&roles, "admin-roles", "r", "", "comma-separated admin roles")
	}
	list := &cobra.Command{Use: "list", Short: "List tenants", Args: cobra.NoArgs, RunE: func(cmd *cobra.Command, _ []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			l, err := c.ListTenants(ctx)
			if err != nil {
				return err
			}
			return a.showList(l)
		})
	}}
	get := &cobra.Command{Use: "get TENANT", Short: "Show a tenant", Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			t, err := c.GetTenant(ctx, args[0])
			if err != nil {
				return err
			}
			return a.show(t, func(tw *tabwriter.Writer) {
				fmt.Fprintf(tw, "allowedClusters\t%s\n", strings.Join(t.AllowedClusters, ","))
				fmt.Fprintf(tw, "adminRoles\t%s\n", strings.Join(t.AdminRoles, ","))
			})
		})
	}}
	create := &cobra.Command{Use: "create TENANT", Short: "Create a tenant", Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
		info := adminapi.TenantInfo{AllowedClusters: splitList(allowed), AdminRoles: splitList(roles)}
		if len(info.AllowedClusters) == 0 {
			return usageErr("--allowed-clusters is required (the clusters the tenant's namespaces may use)")
		}
		if info.AdminRoles == nil {
			info.AdminRoles = []string{}
		}
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			if err := c.CreateTenant(ctx, args[0], info); err != nil {
				return err
			}
			return a.done("tenant %s created", args[0])
		})
	}}
	addFlags(create)
	update := &cobra.Command{Use: "update TENANT", Short: "Change a tenant (flags not given keep their value)", Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			cur, err := c.GetTenant(ctx, args[0])
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("allowed-clusters") {
				cur.AllowedClusters = splitList(allowed)
			}
			if cmd.Flags().Changed("admin-roles") {
				cur.AdminRoles = splitList(roles)
			}
			if err := c.UpdateTenant(ctx, args[0], cur); err != nil {
				return err
			}
			return a.done("tenant %s updated", args[0])
		})
	}}
	addFlags(update)
	del := &cobra.Command{Use: "delete TENANT", Short: "Delete a tenant without namespaces", Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			if err := c.DeleteTenant(ctx, args[0]); err != nil {
				return err
			}
			return a.done("tenant %s deleted", args[0])
		})
	}}
	cmd.AddCommand(list, get, create, update, del)
	return cmd
}

func brokersCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "brokers", Short: "Inspect brokers"}
	list := &cobra.Command{Use: "list [CLUSTER]", Short: "List active brokers", Args: cobra.MaximumNArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			path := "/admin/v2/brokers"
			if len(args) == 1 {
				path += "/" + args[0]
			}
			var l []string
			if _, err := c.Do(ctx, "GET", path, nil, nil, &l); err != nil {
				return err
			}
			return a.showList(l)
		})
	}}
	health := &cobra.Command{Use: "healthcheck", Short: "Check the broker's health (exit status 1 if unhealthy)", Args: cobra.NoArgs, RunE: func(cmd *cobra.Command, _ []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			if err := c.Health(ctx); err != nil {
				return err
			}
			return a.done("ok")
		})
	}}
	var wait time.Duration
	ready := &cobra.Command{Use: "ready", Short: "Check that the broker is ready (exit status 1 if not)", Args: cobra.NoArgs, RunE: func(cmd *cobra.Command, _ []string) error {
		if wait > 0 {
			c, err := a.api()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), wait)
			defer cancel()
			if err := c.WaitReady(ctx, 200*time.Millisecond); err != nil {
				return err
			}
			return a.done("ok")
		}
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			if err := c.Ready(ctx); err != nil {
				return err
			}
			return a.done("ok")
		})
	}}
	ready.Flags().DurationVar(&wait, "wait", 0, "keep asking until ready or this long has passed (e.g. 30s)")
	leader := &cobra.Command{Use: "leader-broker", Short: "Show the leader broker", Args: cobra.NoArgs, RunE: func(cmd *cobra.Command, _ []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			var b adminapi.BrokerInfo
			if _, err := c.Do(ctx, "GET", "/admin/v2/brokers/leaderBroker", nil, nil, &b); err != nil {
				return err
			}
			return a.show(b, func(tw *tabwriter.Writer) {
				fmt.Fprintf(tw, "brokerId\t%s\nserviceUrl\t%s\n", b.BrokerID, b.ServiceURL)
			})
		})
	}}
	cmd.AddCommand(list, health, ready, leader)
	return cmd
}

func escapeSegment(s string) string { return url.PathEscape(s) }
