package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/meridian-mq/meridian/adminapi"
)

func schemasCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "schemas", Short: "Manage topic schemas"}
	var version int64
	get := &cobra.Command{Use: "get TOPIC", Short: "Show a topic's schema (latest, or --version)", Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			s, err := c.GetSchema(ctx, args[0], version)
			if err != nil {
				return err
			}
			return a.show(s, func(tw *tabwriter.Writer) {
				fmt.Fprintf(tw, "version\t%d\ntype\t%s\n", s.Version, s.Type)
				if s.Timestamp > 0 {
					fmt.Fprintf(tw, "registered\t%s\n", time.UnixMilli(s.Timestamp).UTC().Format(time.RFC3339))
				}
				if len(s.Properties) > 0 {
					fmt.Fprintf(tw, "properties\t%v\n", s.Properties)
				}
				fmt.Fprintf(tw, "schema\t%s\n", s.Data)
			})
		})
	}}
	get.Flags().Int64Var(&version, "version", -1, "a specific version")
	var file string
	upload := &cobra.Command{Use: "upload TOPIC", Short: "Register a schema from a file: {\"type\": \"AVRO\", \"schema\": \"...\", \"properties\": {}}", Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
		if file == "" {
			return usageErr("--filename (-f) is required")
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		var p adminapi.SchemaPayload
		if err := json.Unmarshal(b, &p); err != nil {
			return usageErr("%s: %v (want {\"type\": ..., \"schema\": ..., \"properties\": {...}})", file, err)
		}
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			v, err := c.UploadSchema(ctx, args[0], p)
			if err != nil {
				return err
			}
			return a.done("schema version %d of %s", v, args[0])
		})
	}}
	upload.Flags().StringVarP(&file, "filename", "f", "", "schema definition file")
	var force bool
	del := &cobra.Command{Use: "delete TOPIC", Short: "Delete a topic's schema", Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
		return a.call(cmd, func(ctx context.Context, c *adminapi.Client) error {
			if err := c.DeleteSchema(ctx, args[0], force); err != nil {
				return err
			}
			return a.done("schema of %s deleted", args[0])
		})
	}}
	del.Flags().BoolVarP(&force, "force", "f", false, "erase the whole history instead of adding a deletion marker")
	cmd.AddCommand(get, upload, del)
	return cmd
}
