package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/meridian-mq/meridian/adminapi"
)

// app holds the global flags and the lazily built admin client.
type app struct {
	adminURL   string
	serviceURL string
	output     string
	timeout    time.Duration
	out        io.Writer
	errOut     io.Writer
	client     *adminapi.Client
	security   securityFlags
}

func envOr(env func(string) (string, bool), name, def string) string {
	if v, ok := env(name); ok && v != "" {
		return v
	}
	return def
}

func newRootCmd(stdout, stderr io.Writer, env func(string) (string, bool)) *cobra.Command {
	a := &app{out: stdout, errOut: stderr}
	root := &cobra.Command{
		Use:   "meridianctl",
		Short: "Administer Meridian clusters (Pulsar-compatible admin API)",
		Long: `meridianctl talks to a Meridian broker's admin REST API (Pulsar's /admin/v2) with pulsar-admin's
groups and verbs. Settings come from flags, else MERIDIAN_* environment variables, else defaults.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			switch a.output {
			case "table", "json":
			default:
				return usageErr("--output must be table or json, not %q", a.output)
			}
			return nil
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	pf := root.PersistentFlags()
	pf.StringVar(&a.adminURL, "admin-url", envOr(env, "MERIDIAN_ADMIN_URL", "http://127.0.0.1:8080"), "admin REST URL of a broker (env MERIDIAN_ADMIN_URL)")
	pf.StringVar(&a.serviceURL, "service-url", envOr(env, "MERIDIAN_SERVICE_URL", "pulsar://127.0.0.1:6650"), "binary protocol URL for produce/consume/perf (env MERIDIAN_SERVICE_URL)")
	pf.StringVarP(&a.output, "output", "o", envOr(env, "MERIDIAN_OUTPUT", "table"), "output format: table or json (env MERIDIAN_OUTPUT)")
	def, err := time.ParseDuration(envOr(env, "MERIDIAN_TIMEOUT", "30s"))
	if err != nil {
		def = 30 * time.Second
	}
	pf.DurationVar(&a.timeout, "timeout", def, "timeout of each admin request, and of each step of produce/consume/perf on --service-url: connect, lookup, subscribe, send, acknowledge (env MERIDIAN_TIMEOUT)")

	a.security.register(pf, env)

	root.AddCommand(
		clustersCmd(a), tenantsCmd(a), namespacesCmd(a), topicsCmd(a), subscriptionsCmd(a), brokersCmd(a),
		produceCmd(a), consumeCmd(a), perfCmd(a), schemasCmd(a), versionCmd(a), replicationCmd(a), failoverCmd(a),
	)
	for _, group := range root.Commands() {
		if group.HasSubCommands() && group.RunE == nil {
			group.Args = cobra.ArbitraryArgs
			group.RunE = func(cmd *cobra.Command, args []string) error {
				if len(args) > 0 {
					return usageErr("unknown command %q for %q", args[0], cmd.CommandPath())
				}
				return cmd.Help()
			}
		}
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return usageErr("%v", err) })
	return root
}

// api returns the admin client.
func (a *app) api() (*adminapi.Client, error) {
	if a.client == nil {
		tr, err := a.security.transport()
		if err != nil {
			return nil, err
		}
		c, err := adminapi.NewClient(a.adminURL, &http.Client{Timeout: a.timeout, Transport: tr})
		if err != nil {
			return nil, usageErr("%v (set --admin-url or MERIDIAN_ADMIN_URL)", err)
		}
		c.UserAgent = "meridianctl"
		a.client = c
	}
	return a.client, nil
}

// call runs fn with the admin client and a request context.
func (a *app) call(cmd *cobra.Command, fn func(ctx context.Context, c *adminapi.Client) error) error {
	c, err := a.api()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), a.timeout)
	defer cancel()
	return fn(ctx, c)
}

// show prints v as JSON (--output json) or through table.
func (a *app) show(v any, table func(tw *tabwriter.Writer)) error {
	if a.output == "json" {
		enc := json.NewEncoder(a.out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// showList prints a list of names, one per line (or a JSON array).
func (a *app) showList(list []string) error {
	if list == nil {
		list = []string{}
	}
	return a.show(list, func(tw *tabwriter.Writer) {
		for _, s := range list {
			fmt.Fprintln(tw, s)
		}
	})
}

// showJSON prints any value as indented JSON in both modes (policy documents have no useful table).
func (a *app) showJSON(v any) error {
	enc := json.NewEncoder(a.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// done reports a successful write (silent in JSON mode, which has no result to print).
func (a *app) done(format string, args ...any) error {
	if a.output == "json" {
		return nil
	}
	_, err := fmt.Fprintf(a.out, format+"\n", args...)
	return err
}

// usage errors exit with status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErr(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

func isUsage(err error) bool {
	var u *usageError
	if errors.As(err, &u) || errors.Is(err, adminapi.ErrInvalidName) {
		return true
	}
	s := err.Error()
	return strings.HasPrefix(s, "unknown command") || strings.HasPrefix(s, "accepts ") ||
		strings.HasPrefix(s, "requires ") || strings.Contains(s, "required flag")
}

// explain turns an error into a message that says what to do.
func explain(err error, root *cobra.Command) string {
	var se *serviceError
	if errors.As(err, &se) {
		return explainService(se)
	}
	var ae *adminapi.Error
	if errors.As(err, &ae) {
		hint := ""
		switch {
		case strings.Contains(ae.Reason, "Invalid cluster id"):
			hint = "register the cluster first: meridianctl clusters create <name> --url http://<host>:8080 --broker-url pulsar://<host>:6650"
		case strings.Contains(ae.Reason, "not in the list of allowed clusters"):
			hint = "allow the cluster for the tenant first: meridianctl tenants update <tenant> --allowed-clusters <all clusters>"
		case strings.Contains(ae.Reason, "Cannot delete non empty namespace"):
			hint = "delete its topics first, or pass --force"
		case strings.Contains(ae.Reason, "still has active namespaces"):
			hint = "delete its namespaces first (meridianctl namespaces list <tenant>)"
		case ae.StatusCode == http.StatusNotFound && strings.Contains(ae.Reason, "Tenant does not exist"):
			hint = "create it: meridianctl tenants create <tenant> --allowed-clusters <cluster>"
		case ae.StatusCode == http.StatusNotFound && strings.Contains(ae.Reason, "Namespace does not exist"):
			hint = "create it: meridianctl namespaces create <tenant>/<namespace>"
		case ae.StatusCode == http.StatusServiceUnavailable:
			hint = "the broker is starting or its configuration store is unreachable; retry shortly"
		}
		msg := fmt.Sprintf("%s (HTTP %d)", ae.Reason, ae.StatusCode)
		if hint != "" {
			msg += "\nhint: " + hint
		}
		return msg
	}
	var ne net.Error
	var oe *net.OpError
	if errors.As(err, &oe) || errors.As(err, &ne) {
		return fmt.Sprintf("%v\nhint: cannot reach the admin API; is the broker running? Point meridianctl at it with --admin-url or MERIDIAN_ADMIN_URL", err)
	}
	if isUsage(err) {
		return fmt.Sprintf("%v\nhint: see '%s --help'", err, root.Name())
	}
	return err.Error()
}
