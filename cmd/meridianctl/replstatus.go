package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/meridian-mq/meridian/adminapi"
)

// namespaces replication-status: the check a failback (or a migration's cut-over) waits for,
// done by the tool instead of a person reading topic stats one by one. It is safe to move
// clients back to a remote cluster once every topic of the namespace has a replicator to it
// that is connected and has nothing left to send.

// Replicator states, worst last (the order the summary uses).
const (
	replCaughtUp     = "caught-up"     // connected, backlog 0
	replBehind       = "behind"        // connected, entries left to send
	replError        = "error"         // lastError set (it keeps retrying)
	replDisconnected = "disconnected"  // no producer on the remote
	replMissing      = "no-replicator" // the topic does not replicate to this remote
)

// replRow is one (topic, remote) pair of the report.
type replRow struct {
	Topic     string  `json:"topic"`
	Remote    string  `json:"remote"`
	Status    string  `json:"status"`
	Connected bool    `json:"connected"`
	Backlog   int64   `json:"replicationBacklog"`
	DelaySecs int64   `json:"replicationDelayInSeconds"`
	RateOut   float64 `json:"msgRateOut"`
	LastError string  `json:"lastError,omitempty"`
}

// replReport is the outcome of one check.
type replReport struct {
	Namespace string         `json:"namespace"`
	Rows      []replRow      `json:"replicators"`
	Counts    map[string]int `json:"counts"`
	Backlog   int64          `json:"totalBacklog"`
	CaughtUp  bool           `json:"caughtUp"`
	// ReceivesFrom lists the clusters whose replicators write to the namespace's topics here. They
	// are inbound links and are not judged: this cluster cannot drain them.
	ReceivesFrom []string `json:"receivesFrom,omitempty"`
}

// assessReplication judges each topic's replicators. remotes lists the clusters every topic must
// replicate to (a topic without a replicator to one of them is "no-replicator"); when it is
// empty, every replicator a topic has is judged and topics without any are left out.
func assessReplication(ns string, stats map[string]adminapi.TopicStats, remotes []string) replReport {
	r := replReport{Namespace: ns, Counts: map[string]int{}, Rows: []replRow{}}
	for _, t := range slices.Sorted(maps.Keys(stats)) {
		st := stats[t]
		for src := range st.InboundReplication {
			if !slices.Contains(r.ReceivesFrom, src) {
				r.ReceivesFrom = append(r.ReceivesFrom, src)
			}
		}
		want := remotes
		if len(want) == 0 {
			want = slices.Sorted(maps.Keys(st.Replication))
		}
		for _, remote := range want {
			row := replRow{Topic: t, Remote: remote}
			rs, ok := st.Replication[remote]
			// Caught up is "connected, and the remote acknowledged everything stored here"; a
			// lastError the stats still show then (from a broker that does not clear it) does not
			// change that.
			switch {
			case !ok:
				row.Status = replMissing
			case !rs.Connected:
				row.Status = replDisconnected
			case rs.ReplicationBacklog == 0:
				row.Status = replCaughtUp
			case rs.LastError != "":
				row.Status = replError
			default:
				row.Status = replBehind
			}
			if ok {
				row.Connected, row.Backlog, row.DelaySecs = rs.Connected, rs.ReplicationBacklog, rs.ReplicationDelayInSeconds
				row.RateOut, row.LastError = rs.MsgRateOut, rs.LastError
			}
			r.Counts[row.Status]++
			r.Backlog += row.Backlog
			r.Rows = append(r.Rows, row)
		}
	}
	slices.Sort(r.ReceivesFrom)
	r.CaughtUp = r.Counts[replCaughtUp] == len(r.Rows)
	return r
}

// errNotCaughtUp makes the command exit 1 when some replicator is not caught up.
var errNotCaughtUp = errors.New("replication not caught up")

func replicationStatusCmd(a *app) *cobra.Command {
	var (
		remotes  string
		wait     time.Duration
		interval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "replication-status TENANT/NAMESPACE",
		Short: "Check that every topic's replication to --remote is caught up (exit 1 if not); --wait polls until it is",
		Long: `Checks every persistent topic (and partition) of the namespace: a replicator is caught up when it
is connected to the remote and has no backlog (the remote acknowledged everything stored here). Exit status 0 when all are, 1 otherwise:
a failback or cut-over can wait on it ("--wait 10m") instead of a person reading stats. While it
waits, each poll prints a progress line on stderr (caught-up count, backlog, drain rate and the time
left at that rate); -o json prints only the final report.

With --remote, every topic must replicate to each named cluster (a topic that does not is reported as
no-replicator: its messages stay here). Without it, the replicators the topics have are checked.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if interval <= 0 {
				return usageErr("--interval must be positive")
			}
			c, err := a.api()
			if err != nil {
				return err
			}
			ns := args[0]
			deadline := time.Now().Add(wait)
			var progress waitProgress
			for {
				report, err := checkReplication(cmd.Context(), c, a.timeout, ns, splitList(remotes))
				if err != nil {
					return err
				}
				if wait > 0 && a.output != "json" {
					// Progress goes to stderr, one line per poll, so stdout keeps only the report.
					fmt.Fprintln(a.errOut, progress.observe(time.Now(), report))
				}
				if report.CaughtUp || !time.Now().Add(interval).Before(deadline) {
					if err := a.show(report, func(tw *tabwriter.Writer) { writeReplReport(tw, report) }); err != nil {
						return err
					}
					if !report.CaughtUp {
						return fmt.Errorf("%w: %s", errNotCaughtUp, summarizeRepl(report))
					}
					return nil
				}
				select {
				case <-cmd.Context().Done():
					return cmd.Context().Err()
				case <-time.After(interval):
				}
			}
		},
	}
	cmd.Flags().StringVar(&remotes, "remote", "", "comma-separated clusters every topic must replicate to (default: the replicators the topics have)")
	cmd.Flags().DurationVar(&wait, "wait", 0, "poll until caught up or this long has passed (0: check once)")
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "time between polls with --wait")
	return cmd
}

// checkReplication reads the stats of every persistent topic of ns and assesses them.
func checkReplication(ctx context.Context, c *adminapi.Client, timeout time.Duration, ns string, remotes []string) (replReport, error) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	topics, err := c.ListTopics(rctx, ns)
	if err != nil {
		return replReport{}, err
	}
	stats := make(map[string]adminapi.TopicStats, len(topics))
	for _, t := range topics {
		st, err := c.TopicStats(rctx, t)
		if err != nil {
			var apiErr *adminapi.Error
			if errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusNotFound {
				continue // deleted since it was listed
			}
			return replReport{}, fmt.Errorf("stats of %s: %w", t, err)
		}
		stats[t] = st
	}
	return assessReplication(ns, stats, remotes), nil
}

func summarizeRepl(r replReport) string {
	if len(r.Rows) == 0 && len(r.ReceivesFrom) > 0 {
		return fmt.Sprintf("no outbound replicator to judge; this cluster only receives (from %s)", strings.Join(r.ReceivesFrom, ", "))
	}
	s := fmt.Sprintf("%d replicators", len(r.Rows))
	for _, state := range []string{replCaughtUp, replBehind, replError, replDisconnected, replMissing} {
		if n := r.Counts[state]; n > 0 {
			s += fmt.Sprintf(", %d %s", n, state)
		}
	}
	s += fmt.Sprintf("; backlog %d entries", r.Backlog)
	if len(r.ReceivesFrom) > 0 {
		s += fmt.Sprintf("; also receives from %s (inbound, not judged)", strings.Join(r.ReceivesFrom, ", "))
	}
	return s
}

func writeReplReport(tw *tabwriter.Writer, r replReport) {
	if len(r.Rows) == 0 {
		fmt.Fprintf(tw, "%s: %s\n", r.Namespace, summarizeRepl(r))
		return
	}
	fmt.Fprintln(tw, "TOPIC\tREMOTE\tSTATUS\tCONNECTED\tBACKLOG\tDELAY\tRATE OUT\tCATCH-UP\tLAST ERROR")
	for _, row := range r.Rows {
		lastErr := row.LastError
		if lastErr == "" {
			lastErr = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%t\t%d\t%ds\t%.1f/s\t%s\t%s\n", row.Topic, row.Remote, row.Status, row.Connected,
			row.Backlog, row.DelaySecs, row.RateOut, catchUp(row.Backlog, row.RateOut), lastErr)
	}
	fmt.Fprintf(tw, "\n%s: %s\n", r.Namespace, summarizeRepl(r))
}
