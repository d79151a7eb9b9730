// Command meridian runs a Meridian broker.
//
// `meridian standalone` runs one cluster (one broker) with embedded storage and metadata; see
// docs/operations.md for every flag and for how to run it in production.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/meridian-mq/meridian/internal/node"
)

func main() {
	reexecForPollingSysmon(os.Args[1:])
	if runsBroker(os.Args[1:]) {
		node.SpareDiskWaitProc(os.Getenv)
	}
	os.Exit(run(os.Args[1:]))
}

// run executes the command line and returns the process exit code.
func run(args []string) int {
	root := newRootCommand()
	root.SetArgs(args)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "meridian:", err)
		return 1
	}
	return 0
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "meridian",
		Short:         "Meridian: a Pulsar-compatible message broker built for geo-replication",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newStandaloneCommand(), newRepairCommand(), newVersionCommand())
	return root
}
