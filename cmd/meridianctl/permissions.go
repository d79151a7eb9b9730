package main

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/meridian-mq/meridian/adminapi"
)

// permissionCmds are pulsar-admin's permission verbs for a namespace ("namespace") or a topic
// ("topic"): permissions, grant-permission, revoke-permission; a namespace also has
// grant-subscription-permission and revoke-subscription-permission.
func permissionCmds(a *app, kind string) []*cobra.Command {
	arg := "TENANT/NAMESPACE"
	if kind == "topic" {
		arg = "TOPIC"
	}
	base := func(name string) (string, error) {
		if kind == "topic" {
			p, err := adminapi.TopicRESTPath(name)
			return "/admin/v2/" + p + "/permissions", err
		}
		p, err := adminapi.NamespacePath(name)
		return "/admin/v2/namespaces/" + p + "/permissions", err
	}
	show := &cobra.Command{Use: "permissions " + arg, Short: "Show the roles and actions granted on a " + kind, Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
		path, err := base(args[0])
		if err != nil {
			return usageErr("%v", err)
		}
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			out := map[string][]string{}
			if _, err := c.Do(ctx, http.MethodGet, path, nil, nil, &out); err != nil {
				return err
			}
			return a.show(out, func(tw *tabwriter.Writer) {
				roles := make([]string, 0, len(out))
				for r := range out {
					roles = append(roles, r)
				}
				sort.Strings(roles)
				fmt.Fprintln(tw, "ROLE\tACTIONS")
				for _, r := range roles {
					fmt.Fprintf(tw, "%s\t%s\n", r, strings.Join(out[r], ","))
				}
			})
		})
	}}

	var role string
	var actions []string
	grant := &cobra.Command{Use: "grant-permission " + arg + " --role ROLE --actions produce,consume", Short: "Grant a role actions on a " + kind + " (replaces its earlier grant there)", Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
		path, err := base(args[0])
		if err != nil {
			return usageErr("%v", err)
		}
		if role == "" || len(actions) == 0 {
			return usageErr("--role and --actions are required")
		}
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			if _, err := c.Do(ctx, http.MethodPost, path+"/"+escapeSegment(role), nil, actions, nil); err != nil {
				return err
			}
			return a.done("granted %s to %s on %s", strings.Join(actions, ","), role, args[0])
		})
	}}
	grant.Flags().StringVar(&role, "role", "", "the role (a token's subject, a certificate's CN, a basic user)")
	grant.Flags().StringSliceVar(&actions, "actions", nil, "produce, consume, functions, sources, sinks, packages")

	var revokeRole string
	revoke := &cobra.Command{Use: "revoke-permission " + arg + " --role ROLE", Short: "Revoke a role's grant on a " + kind, Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
		path, err := base(args[0])
		if err != nil {
			return usageErr("%v", err)
		}
		if revokeRole == "" {
			return usageErr("--role is required")
		}
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			if _, err := c.Do(ctx, http.MethodDelete, path+"/"+escapeSegment(revokeRole), nil, nil, nil); err != nil {
				return err
			}
			return a.done("revoked %s's grant on %s", revokeRole, args[0])
		})
	}}
	revoke.Flags().StringVar(&revokeRole, "role", "", "the role")
	out := []*cobra.Command{show, grant, revoke}
	if kind == "topic" {
		return out
	}

	var sub string
	var roles []string
	grantSub := &cobra.Command{Use: "grant-subscription-permission TENANT/NAMESPACE --subscription SUB --roles a,b", Short: "Let only these roles consume through a subscription (with consume granted)", Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
		path, err := base(args[0])
		if err != nil {
			return usageErr("%v", err)
		}
		if sub == "" || len(roles) == 0 {
			return usageErr("--subscription and --roles are required")
		}
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			if _, err := c.Do(ctx, http.MethodPost, path+"/subscription/"+escapeSegment(sub), nil, roles, nil); err != nil {
				return err
			}
			return a.done("subscription %s of %s: roles %s", sub, args[0], strings.Join(roles, ","))
		})
	}}
	grantSub.Flags().StringVar(&sub, "subscription", "", "the subscription")
	grantSub.Flags().StringSliceVar(&roles, "roles", nil, "the roles allowed to consume through it")

	var revSub, revSubRole string
	revokeSub := &cobra.Command{Use: "revoke-subscription-permission TENANT/NAMESPACE --subscription SUB --role ROLE", Short: "Remove a role from a subscription's roles", Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
		path, err := base(args[0])
		if err != nil {
			return usageErr("%v", err)
		}
		if revSub == "" || revSubRole == "" {
			return usageErr("--subscription and --role are required")
		}
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			if _, err := c.Do(ctx, http.MethodDelete, path+"/"+escapeSegment(revSub)+"/"+escapeSegment(revSubRole), nil, nil, nil); err != nil {
				return err
			}
			return a.done("removed %s from subscription %s of %s", revSubRole, revSub, args[0])
		})
	}}
	revokeSub.Flags().StringVar(&revSub, "subscription", "", "the subscription")
	revokeSub.Flags().StringVar(&revSubRole, "role", "", "the role")
	return append(out, grantSub, revokeSub)
}
