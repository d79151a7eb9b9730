package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/client"
	"github.com/meridian-mq/meridian/internal/wire"
)

// replication verify: compares what two clusters hold of one topic, per origin cluster. A message
// is identified on every cluster by its origin and its position there: a message written on a has
// origin a and its own position; its copy on b carries replicated_from=a and a's position in
// __MSG_PROP_REPL_SOURCE_POSITION. Its content is a digest of its key, payload and application
// properties, so a copy that differs is told apart from one that is missing.

// originKey is a message's position in its origin cluster (ledger, entry, index in the batch).
type originKey struct {
	ledger, entry uint64
	batch         int32
}

func (k originKey) String() string {
	if k.batch < 0 {
		return fmt.Sprintf("%d:%d", k.ledger, k.entry)
	}
	return fmt.Sprintf("%d:%d:%d", k.ledger, k.entry, k.batch)
}

func (k originKey) compare(o originKey) int {
	switch {
	case k.ledger != o.ledger:
		return cmpU(k.ledger, o.ledger)
	case k.entry != o.entry:
		return cmpU(k.entry, o.entry)
	default:
		return int(k.batch) - int(o.batch)
	}
}

func cmpU(a, b uint64) int {
	if a < b {
		return -1
	}
	return 1
}

// heldMessage is one message as one cluster holds it.
type heldMessage struct {
	key    originKey
	digest [16]byte
}

// verifyRangeSize is how many origin positions one checksum covers.
const verifyRangeSize = 10000

// originReport compares one origin's messages on two clusters.
type originReport struct {
	Origin string `json:"origin"`
	// Counts and Checksums are per cluster, in the order of --clusters.
	Counts    []int    `json:"counts"`
	Checksums []string `json:"checksums"`
	Same      bool     `json:"same"`
	// FirstDifference is the first origin position where the clusters differ.
	FirstDifference string `json:"firstDifference,omitempty"`
	// DifferingRanges counts the ranges of verifyRangeSize positions (of the first cluster's order)
	// whose checksums differ.
	DifferingRanges int `json:"differingRanges"`
}

type verifyReport struct {
	Topic    string         `json:"topic"`
	Clusters []string       `json:"clusters"`
	Origins  []originReport `json:"origins"`
	Same     bool           `json:"same"`
}

// compareHoldings compares per origin what clusters a and b hold (messages sorted by origin key).
func compareHoldings(names [2]string, a, b map[string][]heldMessage) []originReport {
	origins := slices.Sorted(maps.Keys(a))
	for o := range b {
		if _, ok := a[o]; !ok {
			origins = append(origins, o)
		}
	}
	slices.Sort(origins)
	out := make([]originReport, 0, len(origins))
	for _, o := range origins {
		x, y := a[o], b[o]
		r := originReport{Origin: o, Counts: []int{len(x), len(y)}, Checksums: []string{checksum(x), checksum(y)}}
		r.FirstDifference = firstDifference(names, x, y)
		r.Same = r.FirstDifference == ""
		r.DifferingRanges = differingRanges(x, y)
		out = append(out, r)
	}
	return out
}

func checksum(ms []heldMessage) string {
	h := sha256.New()
	var buf [20]byte
	for _, m := range ms {
		binary.BigEndian.PutUint64(buf[0:], m.key.ledger)
		binary.BigEndian.PutUint64(buf[8:], m.key.entry)
		binary.BigEndian.PutUint32(buf[16:], uint32(m.key.batch))
		h.Write(buf[:])
		h.Write(m.digest[:])
	}
	return fmt.Sprintf("%x", h.Sum(nil)[:8])
}

// firstDifference walks both sorted lists and names the first origin position held by only one
// cluster or held with a different content; "" when they are the same.
func firstDifference(names [2]string, x, y []heldMessage) string {
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case j == len(y) || (i < len(x) && x[i].key.compare(y[j].key) < 0):
			return fmt.Sprintf("%s: on %s, missing on %s", x[i].key, names[0], names[1])
		case i == len(x) || x[i].key.compare(y[j].key) > 0:
			return fmt.Sprintf("%s: on %s, missing on %s", y[j].key, names[1], names[0])
		case x[i].digest != y[j].digest:
			return fmt.Sprintf("%s: content differs", x[i].key)
		}
		i, j = i+1, j+1
	}
	return ""
}

// differingRanges splits the union of both clusters' positions into ranges of verifyRangeSize
// positions of x and counts those whose checksums differ.
func differingRanges(x, y []heldMessage) int {
	n, j := 0, 0
	for i := 0; i < len(x) || j < len(y); {
		end := min(i+verifyRangeSize, len(x))
		var jEnd int
		if end == len(x) {
			jEnd = len(y)
		} else {
			last := x[end-1].key
			jEnd = j
			for jEnd < len(y) && y[jEnd].key.compare(last) <= 0 {
				jEnd++
			}
		}
		if checksum(x[i:end]) != checksum(y[j:jEnd]) {
			n++
		}
		i, j = end, jEnd
		if i == len(x) && j == len(y) {
			break
		}
	}
	return n
}

// holdings reads every message of topic (all partitions) on one cluster and sorts them by origin.
func holdings(ctx context.Context, a *app, cluster adminapi.ClusterData, local, topic string) (map[string][]heldMessage, error) {
	admin, err := adminapi.NewClient(cluster.ServiceURL, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: admin URL: %w", local, err)
	}
	c, err := client.New(client.Options{ServiceURL: cluster.BrokerServiceURL, ClientVersion: "meridianctl-verify", OperationTimeout: a.timeout})
	if err != nil {
		return nil, fmt.Errorf("%s: service URL: %w", local, err)
	}
	defer c.Close()
	parts, err := withStepTimeout(ctx, a.timeout, func(ctx context.Context) ([]string, error) { return partitions(ctx, c, topic) })
	if err != nil {
		return nil, fmt.Errorf("%s: %w", local, err)
	}
	out := map[string][]heldMessage{}
	for _, p := range parts {
		if err := readPartition(ctx, a, admin, c, local, p, out); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", local, p, err)
		}
	}
	for o := range out {
		slices.SortFunc(out[o], func(x, y heldMessage) int { return x.key.compare(y.key) })
	}
	return out, nil
}

// readPartition reads one topic from its first message to the last one stored when it starts.
func readPartition(ctx context.Context, a *app, admin *adminapi.Client, c *client.Client, local, topic string, out map[string][]heldMessage) error {
	last, err := withStepTimeout(ctx, a.timeout, func(ctx context.Context) (adminapi.MessageID, error) { return admin.LastMessageID(ctx, topic) })
	if err != nil {
		return fmt.Errorf("last message id: %w", err)
	}
	if last.LedgerID < 0 || last.EntryID < 0 {
		return nil // nothing stored
	}
	earliest := client.Earliest
	cons, err := withStepTimeout(ctx, a.timeout, func(ctx context.Context) (*client.Consumer, error) {
		return c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "meridianctl-verify", NonDurable: true, StartMessageID: &earliest})
	})
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), a.timeout)
		defer cancel()
		_ = cons.Close(cctx)
	}()
	end := originKey{uint64(last.LedgerID), uint64(last.EntryID), 0}
	for {
		m, err := withStepTimeout(ctx, a.timeout, func(ctx context.Context) (*client.Message, error) { return cons.Receive(ctx) })
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		origin, key, err := originOf(local, m)
		if err != nil {
			return err
		}
		out[origin] = append(out[origin], heldMessage{key: key, digest: contentDigest(m)})
		if here := (originKey{m.ID.LedgerID, m.ID.EntryID, 0}); here.compare(end) >= 0 && m.ID.BatchIndex >= m.ID.BatchSize-1 {
			return nil
		}
	}
}

// originOf returns a message's origin cluster and its position there.
func originOf(local string, m *client.Message) (string, originKey, error) {
	batch := m.ID.BatchIndex
	if m.ReplicatedFrom == "" {
		return local, originKey{m.ID.LedgerID, m.ID.EntryID, batch}, nil
	}
	pos := m.Properties[wire.ReplSourcePositionProperty]
	l, e, ok := strings.Cut(pos, ":")
	ledger, err1 := strconv.ParseUint(l, 10, 64)
	entry, err2 := strconv.ParseUint(e, 10, 64)
	if !ok || errors.Join(err1, err2) != nil {
		return "", originKey{}, fmt.Errorf("message %v replicated from %s has no source position (%q)", m.ID, m.ReplicatedFrom, pos)
	}
	return m.ReplicatedFrom, originKey{ledger, entry, batch}, nil
}

// contentDigest covers what an application sees: key, payload and its own properties (not the
// replication properties a copy gains).
func contentDigest(m *client.Message) [16]byte {
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s|%d:", len(m.Key), m.Key, len(m.Payload))
	h.Write(m.Payload)
	for _, k := range slices.Sorted(maps.Keys(m.Properties)) {
		if strings.HasPrefix(k, "__MSG_PROP_REPL_") {
			continue
		}
		fmt.Fprintf(h, "|%d:%s=%d:%s", len(k), k, len(m.Properties[k]), m.Properties[k])
	}
	var d [16]byte
	copy(d[:], h.Sum(nil))
	return d
}

func replicationVerifyCmd(a *app) *cobra.Command {
	var clusters, origins string
	cmd := &cobra.Command{
		Use:   "verify TOPIC --clusters a,b",
		Short: "Compare a topic's content on two clusters, per origin cluster; exit 1 at the first difference",
		Long: `Reads the topic (every partition) on both clusters, from its first message to the last one stored
when the command starts, and compares per origin cluster: how many messages each holds, a checksum over
their origin positions and contents, and the first origin position held by only one of them or held
with a different content. The clusters' URLs come from the cluster data of the cluster at --admin-url.
Messages that retention already removed on one side show as missing there: compare clusters with the
same retention, or read the first difference with that in mind. With one-way replication a -> b, the
messages written on b exist only there: compare --origins a. Exit status 0 when both hold the same
messages, 1 when they differ.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			names := splitList(clusters)
			if len(names) != 2 {
				return usageErr("--clusters takes two cluster names, e.g. --clusters a,b")
			}
			api, err := a.api()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var held [2]map[string][]heldMessage
			for i, name := range names {
				data, err := withStepTimeout(ctx, a.timeout, func(ctx context.Context) (adminapi.ClusterData, error) { return api.GetCluster(ctx, name) })
				if err != nil {
					return fmt.Errorf("cluster %s: %w", name, err)
				}
				if held[i], err = holdings(ctx, a, data, name, args[0]); err != nil {
					return err
				}
			}
			if only := splitList(origins); len(only) > 0 {
				for i := range held {
					maps.DeleteFunc(held[i], func(o string, _ []heldMessage) bool { return !slices.Contains(only, o) })
				}
			}
			report := verifyReport{Topic: args[0], Clusters: names, Same: true,
				Origins: compareHoldings([2]string{names[0], names[1]}, held[0], held[1])}
			for _, o := range report.Origins {
				report.Same = report.Same && o.Same
			}
			if err := a.show(report, func(tw *tabwriter.Writer) { writeVerifyReport(tw, report) }); err != nil {
				return err
			}
			if !report.Same {
				return errNotSame
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&clusters, "clusters", "", "the two clusters to compare, e.g. a,b")
	cmd.Flags().StringVar(&origins, "origins", "", "compare only the messages written on these clusters (default: all)")
	return cmd
}

var errNotSame = errors.New("the clusters hold different messages")

func writeVerifyReport(tw *tabwriter.Writer, r verifyReport) {
	fmt.Fprintf(tw, "ORIGIN\tON %s\tON %s\tCHECKSUMS\tFIRST DIFFERENCE\n", strings.ToUpper(r.Clusters[0]), strings.ToUpper(r.Clusters[1]))
	for _, o := range r.Origins {
		sums, diff := "same", o.FirstDifference
		if o.Checksums[0] != o.Checksums[1] {
			sums = fmt.Sprintf("%s / %s", o.Checksums[0], o.Checksums[1])
		}
		if diff == "" {
			diff = "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", o.Origin, o.Counts[0], o.Counts[1], sums, diff)
	}
	verdict := "same messages on both"
	if !r.Same {
		verdict = "the clusters differ"
	}
	fmt.Fprintf(tw, "\n%s: %s\n", r.Topic, verdict)
}

// replicationCmd groups the replication commands that span clusters.
func replicationCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "replication", Short: "Checks across clusters: verify a topic's content"}
	cmd.AddCommand(replicationVerifyCmd(a))
	return cmd
}
