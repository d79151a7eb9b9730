// Command meridianctl administers Meridian clusters through the admin REST API, with the groups and
// verbs of Pulsar's pulsar-admin (clusters, tenants, namespaces, topics, subscriptions, brokers).
//
// It links only the public adminapi package (never the broker). The admin URL comes from --admin-url,
// MERIDIAN_ADMIN_URL or http://127.0.0.1:8080; --output json (or MERIDIAN_OUTPUT=json) prints JSON for
// scripts instead of tables. See docs/cli.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/meridian-mq/meridian/internal/failover"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv))
}

// run executes one command line and returns the process exit code (0 ok, 1 failure, 2 usage).
func run(ctx context.Context, args []string, stdout, stderr io.Writer, env func(string) (string, bool)) int {
	root := newRootCmd(stdout, stderr, env)
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "error:", explain(err, root))
		if isUsage(err) || errors.Is(err, failover.ErrCannotTell) {
			return 2 // a usage error, or a check that could not tell (failover check)
		}
		return 1
	}
	return 0
}
