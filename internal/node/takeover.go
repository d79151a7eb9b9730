package node

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/internal/broker"
	"github.com/meridian-mq/meridian/internal/cluster"
	"github.com/meridian-mq/meridian/internal/handover"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/replication"
	"github.com/meridian-mq/meridian/internal/storage"
)

// A dead broker's bundles (docs/cluster.md, "When a broker dies"; the records' side is
// internal/cluster, takeover.go). Another broker takes them over and serves them with the data it
// has; the dead broker's data comes back when it does:
//
//   - the owner of a bundle whose record names a live stranded broker hands the bundle over to it
//     (followStranded);
//   - that broker, receiving a topic it holds a ledger of, merges the two ledgers (mergeLedger):
//     both sides' segments, ordered by ledger id (everything written after the takeover has the
//     higher ids), and each subscription's acknowledgements from both sides;
//   - a stranded broker that holds nothing of a bundle takes itself off the record.
//
// A broker that loses a bundle other than by handing it over (taken over while it was cut off from
// etcd) closes the bundle's topics at once (releaseLostBundle).

// strandedCheckInterval is how often a broker looks for bundles to hand back to a returned broker,
// and for bundles it is stranded on but holds nothing of.
var strandedCheckInterval = 2 * time.Second

// strandedRetryAfter is how long a bundle whose hand-back failed is left alone.
const strandedRetryAfter = 30 * time.Second

// followStranded runs strandedPass every strandedCheckInterval until ctx ends.
func (n *Node) followStranded(ctx context.Context) {
	t := time.NewTicker(strandedCheckInterval)
	defer t.Stop()
	failed := map[cluster.Bundle]time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n.strandedPass(ctx, failed)
	}
}

// strandedPass hands the bundles this broker serves back to stranded brokers that are live again,
// leaving alone for strandedRetryAfter a bundle whose hand-back failed (failed says when), and
// takes this broker off the bundles it is stranded on but holds nothing of.
func (n *Node) strandedPass(ctx context.Context, failed map[cluster.Bundle]time.Time) {
	m := n.components.member
	for _, mv := range m.coord.StrandedReturns() {
		if at, ok := failed[mv.Bundle]; ok && time.Since(at) < strandedRetryAfter {
			continue
		}
		m.log.Info("handing a bundle back to a broker that held it when it died", "bundle", mv.Bundle.String(), "to", mv.To.ID)
		if err := n.handOver(ctx, mv.Bundle, mv.To); err != nil {
			failed[mv.Bundle] = time.Now()
			m.log.Warn("handing a bundle back failed; trying again later", "bundle", mv.Bundle.String(), "to", mv.To.ID,
				"retryAfter", strandedRetryAfter, "err", err)
			continue
		}
		delete(failed, mv.Bundle)
	}
	for _, b := range m.coord.StrandedHere() {
		m.unstrandIfEmpty(ctx, b)
	}
}

// unstrandIfEmpty takes this broker off b's stranded brokers when its storage holds no topic of b:
// nothing of b needs merging here.
func (m *clusterMember) unstrandIfEmpty(ctx context.Context, b cluster.Bundle) {
	m.importMu.Lock() // no move into this broker adds a topic meanwhile
	defer m.importMu.Unlock()
	topics, err := m.storedBundleTopics(ctx, b)
	if err != nil || len(topics) > 0 {
		return
	}
	if err := m.coord.Unstrand(ctx, b); err != nil {
		m.log.Debug("unstrand failed; trying again later", "bundle", b.String(), "err", err)
		return
	}
	m.log.Info("this broker holds nothing of a bundle taken over from it", "bundle", b.String())
}

// storedBundleTopics lists the persistent topics of bundle b this broker's storage holds a ledger
// of, from storage itself (the broker need not serve them, or exist yet).
func (m *clusterMember) storedBundleTopics(ctx context.Context, b cluster.Bundle) ([]naming.TopicName, error) {
	ns, err := naming.ParseNamespace(b.Namespace)
	if err != nil {
		return nil, err
	}
	prefix := ns.Tenant + "/" + ns.Namespace + "/" + string(naming.Persistent) + "/"
	names, err := m.engine.ListLedgers(ctx, prefix)
	if err != nil {
		return nil, err
	}
	var out []naming.TopicName
	for _, name := range names {
		t, err := naming.NewTopic(naming.Persistent, ns, strings.TrimPrefix(name, prefix))
		if err != nil || t.StorageName() != name || !m.inBundle(b, t) {
			continue
		}
		out = append(out, t)
	}
	return out, nil
}

// releaseLostBundle stops serving bundle b, which this broker lost other than by handing it over:
// its replicators stop and its loaded topics close, so their clients find the owner through
// lookup.
func (n *Node) releaseLostBundle(ctx context.Context, b cluster.Bundle) {
	c := &n.components
	topics, err := n.bundleTopics(ctx, b)
	if err == nil {
		for _, t := range topics {
			c.replication.TopicUnloaded(ctx, t.String())
		}
	}
	if err := n.closeBundleTopics(ctx, b, broker.Reassigned{}); err != nil {
		c.member.log.Warn("closing the topics of a lost bundle failed", "bundle", b.String(), "err", err)
		return
	}
	c.member.log.Warn("stopped serving a bundle this broker lost", "bundle", b.String())
}

// mergeLedger stores a topic streamed by the bundle's owner into this broker's ledger of the same
// topic, which holds what this broker wrote before the bundle was taken over from it. The merged
// ledger has both sides' segments in ledger-id order: the owner's were all created after the
// takeover with ids above the record's floor, so this broker's messages come first and a
// producer's order holds. A segment both sides hold (a copy of an earlier move) is taken from the
// stream, and a copied segment the stream lacks is dropped. Subscriptions merge as storage.MergeCursorRecords says; the inbound replication index is
// left out on both sides and rebuilt from the merged log when the topic loads (it indexes entries
// of both). The merge replaces the local ledger in one step (Engine.ImportLedgerReplacing): a crash
// leaves the old one or the merged one. It returns the entries stored from the stream.
func (m *clusterMember) mergeLedger(ctx context.Context, rd *handover.Reader, topic naming.TopicName, incoming func() error) (int64, error) {
	h := rd.Header()
	name := topic.StorageName()
	local, err := m.engine.OpenLedger(ctx, name)
	if err != nil {
		return 0, err
	}
	localOpen := true
	defer func() {
		if localOpen {
			_ = local.Close()
		}
	}()
	exp, err := local.Export(ctx)
	if err != nil {
		return 0, err
	}
	streamed := map[int64]bool{}
	var theirs []storage.ExportedSegment
	for _, s := range h.Segments {
		streamed[s.ID] = true
		theirs = append(theirs, storage.ExportedSegment{ID: s.ID, Incarnation: s.Incarnation, Entries: s.Entries})
	}
	// Ours are the segments this broker wrote. A segment it holds as a copy (a merge that an
	// aborted hand-back committed) is the owner's to keep or trim: if the stream lacks it now, it
	// was trimmed or its topic deleted, and must not come back.
	var ours []storage.ExportedSegment
	for _, s := range exp.Segments {
		if !streamed[s.ID] && m.engine.WroteIncarnation(s.Incarnation) {
			ours = append(ours, s)
		}
	}
	cursors, err := storage.MergeCursorRecords(
		storage.CursorSide{Records: withoutIndexCursors(exp.Cursors), Segments: ours},
		storage.CursorSide{Records: withoutIndexCursors(h.Cursors), Segments: theirs})
	if err != nil {
		return 0, fmt.Errorf("merge the subscriptions of %s: %w", topic, err)
	}
	imp, err := m.engine.ImportLedgerReplacing(ctx, name)
	if err != nil {
		return 0, err
	}
	committed := false
	defer func() {
		if !committed {
			imp.Abort()
		}
	}()
	next := 0 // the next of our segments to copy
	copyOursBelow := func(limit int64) error {
		for ; next < len(ours) && ours[next].ID < limit; next++ {
			s := ours[next]
			if err := imp.StartSegment(s.ID, s.Incarnation); err != nil {
				return err
			}
			if err := readSegment(ctx, local, s.ID, s.Entries, func(data []byte, publishTime int64) error {
				return imp.Append(ctx, data, publishTime)
			}); err != nil {
				return fmt.Errorf("copy segment %d of the local %s: %w", s.ID, topic, err)
			}
		}
		return nil
	}
	stored, err := importStream(ctx, rd, imp, copyOursBelow)
	if err != nil {
		return stored, err
	}
	if err := copyOursBelow(math.MaxInt64); err != nil {
		return stored, err
	}
	if err := imp.SetCursors(cursors); err != nil {
		return stored, err
	}
	if err := incoming(); err != nil {
		return stored, err
	}
	localOpen = false
	if err := local.Close(); err != nil {
		return stored, err
	}
	if err := imp.Commit(ctx); err != nil {
		return stored, err
	}
	committed = true
	m.log.Info("topic received and merged with this broker's copy", "topic", topic.String(), "from", h.From,
		"entries", stored, "localSegments", len(ours))
	return stored, nil
}

// withoutIndexCursors drops the inbound replication index's cursors (its head and chunks) from
// exported cursor records: a merged log's index is rebuilt from the log.
func withoutIndexCursors(records [][]byte) [][]byte {
	var out [][]byte
	for _, r := range records {
		if name, err := storage.CursorRecordName(r); err == nil && strings.HasPrefix(name, replication.IndexCursorName) {
			continue
		}
		out = append(out, r)
	}
	return out
}
