package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/buildinfo"
)

// versionReport is `meridianctl version -o json`.
type versionReport struct {
	Client adminapi.BuildInfo `json:"client"`
	// Broker is the broker's build (Meridian) or its version alone (a Pulsar broker); nil with
	// --client.
	Broker *adminapi.BuildInfo `json:"broker,omitempty"`
}

func versionCmd(a *app) *cobra.Command {
	var clientOnly bool
	cmd := &cobra.Command{Use: "version", Short: "Show how meridianctl and the broker at --admin-url were built", Args: cobra.NoArgs, RunE: func(cmd *cobra.Command, args []string) error {
		rep := versionReport{Client: buildinfo.Read()}
		var brokerErr error
		if !clientOnly {
			brokerErr = a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
				bi, err := c.BrokerBuildInfo(ctx)
				if adminapi.IsStatus(err, 404) { // a Pulsar broker: its version string only
					var v string
					if v, err = c.BrokerVersion(ctx); err == nil {
						bi = adminapi.BuildInfo{Version: v}
					}
				}
				if err == nil {
					rep.Broker = &bi
				}
				return err
			})
		}
		// The client's build is printed even when the broker cannot be reached.
		if err := a.show(rep, func(tw *tabwriter.Writer) {
			writeBuild(tw, "client", rep.Client)
			if rep.Broker != nil {
				writeBuild(tw, "broker "+a.adminURL, *rep.Broker)
			}
		}); err != nil {
			return err
		}
		return brokerErr
	}}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "show meridianctl's build only (no request to the broker)")
	return cmd
}

func writeBuild(tw *tabwriter.Writer, who string, bi adminapi.BuildInfo) {
	fmt.Fprintf(tw, "%s\tversion %s\n", who, bi.Version)
	if bi.Commit != "" {
		modified := ""
		if bi.Modified {
			modified = " (modified)"
		}
		fmt.Fprintf(tw, "\tcommit %s%s %s\n", bi.Commit, modified, bi.CommitTime)
	}
	if bi.GoVersion != "" {
		fmt.Fprintf(tw, "\tgo %s\n", bi.GoVersion)
	}
}
