package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/meridian-mq/meridian/internal/buildinfo"
)

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Show how this binary was built: module version, commit, Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bi := buildinfo.Read()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "meridian %s\n", bi.Version)
			if bi.Module != "" {
				fmt.Fprintf(out, "module   %s\n", bi.Module)
			}
			if bi.Commit != "" {
				modified := ""
				if bi.Modified {
					modified = " (modified)"
				}
				fmt.Fprintf(out, "commit   %s%s %s\n", bi.Commit, modified, bi.CommitTime)
			}
			fmt.Fprintf(out, "go       %s\n", bi.GoVersion)
			return nil
		},
	}
}
