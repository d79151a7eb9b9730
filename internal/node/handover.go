package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/internal/admin"
	"github.com/meridian-mq/meridian/internal/broker"
	"github.com/meridian-mq/meridian/internal/cluster"
	"github.com/meridian-mq/meridian/internal/handover"
	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/server"
	"github.com/meridian-mq/meridian/internal/storage"
)

// Moving a bundle between brokers (docs/cluster.md, "Moving a bundle"). The bundle's messages are on
// its owner's disk, so a bundle moves with its data: the owner marks the bundle as moving (lookups
// hold, and it stops serving it), closes its topics, streams every topic's ledger (segments with
// their ledger ids, entries, cursors) to the target, and only then names the target as owner. It
// deletes its own copy last. Any failure before that leaves the bundle with its owner.
//
// The same step serves an admin unload, the load shedder and a broker that stops.

// topicCloseTimeout bounds closing one bundle's topics at the start of a move.
const topicCloseTimeout = 30 * time.Second

// handOverReadBatch bounds one read of a ledger being streamed.
const (
	handOverReadEntries = 512
	handOverReadBytes   = 4 << 20
)

// handOver moves one bundle this broker serves to target. Clients of the bundle's topics are
// disconnected at the start and find the target through lookup once it ends.
func (n *Node) handOver(ctx context.Context, b cluster.Bundle, target cluster.BrokerInfo) error {
	c := &n.components
	m := c.member
	began := time.Now()
	if !m.startMove(b) {
		return fmt.Errorf("bundle %s: %w: a move of it is under way here", b, cluster.ErrNotOwner)
	}
	defer m.endMove(b)
	epoch, err := m.coord.BeginHandOver(ctx, b, target.ID)
	if err != nil {
		return err
	}
	topics, entries, err := n.copyBundle(ctx, b, target, epoch)
	if err == nil {
		err = m.coord.CompleteHandOver(ctx, b)
	}
	if err != nil {
		// The bundle stays here: lookups connect to this broker again, and the target's partial copy
		// is never served (it is replaced if the bundle moves there later).
		if aerr := m.coord.AbortHandOver(context.WithoutCancel(ctx), b); aerr != nil {
			m.log.Error("ending a failed hand-over failed; the orphaned-move check ends it", "bundle", b.String(), "err", aerr)
		}
		for _, t := range topics { // their replicators were stopped: they start again here, if it is still ours
			if m.coord.Owns(t.NamespaceName().String(), t.String()) {
				c.replication.TopicLoaded(t.String())
			}
		}
		return fmt.Errorf("hand bundle %s over to %s: %w", b, target.ID, err)
	}
	m.log.Info("bundle moved", "bundle", b.String(), "to", target.ID, "topics", len(topics), "entries", entries,
		"took", time.Since(began).Round(time.Millisecond))
	for _, t := range topics {
		if err := c.engine.DeleteLedger(context.WithoutCancel(ctx), t.StorageName()); err != nil {
			m.log.Warn("deleting the copy of a moved topic failed; it is deleted at the next start", "topic", t.String(), "err", err)
		}
	}
	return nil
}

// copyBundle closes the bundle's topics here and streams each persistent topic's ledger to target.
func (n *Node) copyBundle(ctx context.Context, b cluster.Bundle, target cluster.BrokerInfo, epoch int64) ([]naming.TopicName, int64, error) {
	c := &n.components
	topics, err := n.bundleTopics(ctx, b)
	if err != nil {
		return nil, 0, err
	}
	// Replicators stop first, with their positions saved; then what is loaded closes: clients are
	// disconnected and look the topic up again (held until the bundle has its new owner). Closing
	// saves the topic's dedup and index state, so it has its own bound, whatever is left of the
	// move's.
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), topicCloseTimeout)
	defer cancel()
	for _, t := range topics {
		c.replication.TopicUnloaded(closeCtx, t.String())
	}
	// On failure every topic is returned: their replicators were stopped and start again.
	// Their clients are sent to the target, where they wait for the move to end (a lookup would
	// hold just as long).
	to := broker.Reassigned{ServiceURL: target.ServiceURL, ServiceURLTLS: target.ServiceURLTLS}
	if err := n.closeBundleTopics(closeCtx, b, to); err != nil {
		return topics, 0, err
	}
	var entries int64
	for _, t := range topics {
		got, err := n.sendLedger(ctx, b, t, target, epoch)
		if err != nil {
			return topics, entries, fmt.Errorf("copy %s: %w", t, err)
		}
		entries += got
	}
	return topics, entries, nil
}

// sendLedger streams one topic's ledger to target's hand-over endpoint.
func (n *Node) sendLedger(ctx context.Context, b cluster.Bundle, t naming.TopicName, target cluster.BrokerInfo, epoch int64) (sent int64, err error) {
	c := &n.components
	l, err := c.engine.OpenLedger(ctx, t.StorageName())
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			_ = l.Close() // the topic stays here; it loads again when it is used
		}
	}()
	exp, err := l.Export(ctx)
	if err != nil {
		return 0, err
	}
	h := handover.Header{From: c.member.coord.Self().ID, Epoch: epoch, Bundle: b.String(), Topic: t.String(), Cursors: exp.Cursors}
	for _, s := range exp.Segments {
		h.Segments = append(h.Segments, handover.Segment{ID: s.ID, Incarnation: s.Incarnation, Entries: s.Entries})
	}
	pr, pw := io.Pipe()
	written := make(chan error, 1)
	go func() {
		err := n.writeLedger(ctx, l, h, pw)
		pw.CloseWithError(err)
		written <- err
	}()
	defer func() {
		pr.CloseWithError(errors.New("request ended")) // stops the writer if the request ended early
		if werr := <-written; err == nil && werr != nil {
			err = werr
		}
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, webBase(target)+"/internal/v1/bundle-handover", pr)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.member.handOverHTTP.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxRemoteBody))
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s answered %d: %s", target.ID, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	var ans struct {
		Entries int64 `json:"entries"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		return 0, fmt.Errorf("%s's answer: %w", target.ID, err)
	}
	var want int64
	for _, s := range h.Segments {
		want += s.Entries
	}
	if ans.Entries != want {
		return 0, fmt.Errorf("%s stored %d entries of %d", target.ID, ans.Entries, want)
	}
	return want, nil
}

// writeLedger writes the stream of one ledger: its header, then every entry of its segments.
func (n *Node) writeLedger(ctx context.Context, l *storage.Ledger, h handover.Header, out io.Writer) error {
	w, err := handover.NewWriter(out, h, n.maxEntryBytes())
	if err != nil {
		return err
	}
	for _, s := range h.Segments {
		if err := readSegment(ctx, l, s.ID, s.Entries, w.WriteEntry); err != nil {
			return err
		}
	}
	return w.Close()
}

// readSegment passes entries 0..entries-1 of segment id of l to fn, in order.
func readSegment(ctx context.Context, l *storage.Ledger, id, entries int64, fn func(data []byte, publishTime int64) error) error {
	from := mtypes.Position{LedgerID: id}
	for from.EntryID < entries {
		es, err := l.Read(ctx, from, min(handOverReadEntries, int(entries-from.EntryID)), handOverReadBytes)
		if err != nil {
			return err
		}
		if len(es) == 0 {
			return fmt.Errorf("ledger %s: no entry at %s", l.Name(), from)
		}
		for _, e := range es {
			if e.Position != from {
				return fmt.Errorf("ledger %s: read %s where %s was due", l.Name(), e.Position, from)
			}
			if err := fn(e.Data, e.PublishTime); err != nil {
				return err
			}
			from = from.Next()
			if from.EntryID == entries {
				break
			}
		}
	}
	return nil
}

func (n *Node) maxEntryBytes() int { return n.opts.MaxMessageSize + server.FramePadding }

// AcceptHandOver implements admin.Ownership: it stores one topic's ledger streamed by the owner of
// a bundle handing it over to this broker.
func (a adminMember) AcceptHandOver(ctx context.Context, body io.Reader) (int64, error) {
	return a.m.acceptLedger(ctx, body)
}

func (m *clusterMember) acceptLedger(ctx context.Context, body io.Reader) (int64, error) {
	m.importMu.Lock()
	defer m.importMu.Unlock()
	rd, err := handover.NewReader(body, m.maxEntryBytes)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", admin.ErrHandOverMalformed, err)
	}
	h := rd.Header()
	topic, err := naming.ParseTopic(h.Topic)
	if err != nil || !topic.IsPersistent() {
		return 0, fmt.Errorf("%w: topic %q", admin.ErrHandOverMalformed, h.Topic)
	}
	b := m.coord.BundleOf(topic.NamespaceName().String(), topic.String())
	if b.String() != h.Bundle {
		return 0, fmt.Errorf("%w: topic %s is in bundle %s, not %s", admin.ErrHandOverMalformed, topic, b, h.Bundle)
	}
	incoming := func() error {
		if m.coord.Draining() {
			return fmt.Errorf("%w: this broker is stopping", admin.ErrHandOverRefused)
		}
		err := m.coord.IncomingHandOver(ctx, b, h.From, h.Epoch)
		if errors.Is(err, cluster.ErrHandOverRefused) {
			return fmt.Errorf("%w: %v", admin.ErrHandOverRefused, err)
		}
		return err
	}
	if err := incoming(); err != nil {
		return 0, err
	}
	name := topic.StorageName()
	if ok, err := m.engine.LedgerExists(ctx, name); err != nil {
		return 0, err
	} else if ok {
		own, _, err := m.coord.StoredRecord(ctx, b)
		if err != nil {
			return 0, err
		}
		if own.HoldsStranded(m.coord.Self().ID) {
			// This broker held the bundle when it died and another took it over: its copy holds
			// messages the owner's lacks, and the two merge (takeover.go).
			return m.mergeLedger(ctx, rd, topic, incoming)
		}
		// A copy left from an earlier time this broker owned the bundle is stale: the owner's is
		// current.
		if err := m.engine.DeleteLedger(ctx, name); err != nil {
			return 0, err
		}
	}
	imp, err := m.engine.ImportLedger(ctx, name)
	if err != nil {
		return 0, err
	}
	committed := false
	defer func() {
		if !committed {
			imp.Abort()
		}
	}()
	stored, err := importStream(ctx, rd, imp, nil)
	if err != nil {
		return stored, err
	}
	if err := imp.SetCursors(h.Cursors); err != nil {
		return stored, fmt.Errorf("%w: cursors: %v", admin.ErrHandOverMalformed, err)
	}
	// The move may have ended while the stream ran (aborted, or a later one began): then this copy
	// is not the bundle's.
	if err := incoming(); err != nil {
		return stored, err
	}
	if err := imp.Commit(ctx); err != nil {
		return stored, err
	}
	committed = true
	m.log.Info("topic received", "topic", topic.String(), "from", h.From, "entries", stored)
	return stored, nil
}

// importStream appends the entries of a hand-over stream to imp, starting each of the stream's
// segments; beforeSegment, when set, runs before each segment starts (a merge writes its own
// lower segments there). It returns the entries stored.
func importStream(ctx context.Context, rd *handover.Reader, imp *storage.LedgerImport, beforeSegment func(id int64) error) (int64, error) {
	h := rd.Header()
	var stored int64
	seg := -1
	for {
		e, err := rd.Next()
		if err == io.EOF {
			return stored, nil
		}
		if err != nil {
			return stored, fmt.Errorf("%w: %v", admin.ErrHandOverMalformed, err)
		}
		if e.Segment != seg {
			seg = e.Segment
			s := h.Segments[seg]
			if beforeSegment != nil {
				if err := beforeSegment(s.ID); err != nil {
					return stored, err
				}
			}
			if err := imp.StartSegment(s.ID, s.Incarnation); err != nil {
				return stored, err
			}
		}
		if err := imp.Append(ctx, e.Data, e.PublishTime); err != nil {
			return stored, err
		}
		stored++
	}
}

// dropAbandonedCopies deletes the topics of bundle b a move to this broker brought before it was
// abandoned, unless the bundle has since become this broker's or moves here again (its record,
// read from the store under importMu, says). They are not the bundle's data: kept, an old copy of a
// topic the owner deletes meanwhile would come back if the bundle moved here later.
func (m *clusterMember) dropAbandonedCopies(ctx context.Context, b cluster.Bundle) {
	m.importMu.Lock()
	defer m.importMu.Unlock()
	own, ok, err := m.coord.StoredRecord(ctx, b)
	if err != nil {
		m.log.Warn("checking an abandoned move failed; its copies stay until the next start", "bundle", b.String(), "err", err)
		return
	}
	self := m.coord.Self().ID
	if ok && (own.Broker == self || own.MovingTo == self || own.HoldsStranded(self)) {
		// Ours, on its way here again, or holding messages of the bundle nobody else has.
		return
	}
	// From storage itself: the broker serves none of these topics, and may not exist yet.
	topics, err := m.storedBundleTopics(ctx, b)
	if err != nil {
		return
	}
	for _, t := range topics {
		if err := m.engine.DeleteLedger(ctx, t.StorageName()); err != nil {
			m.log.Warn("deleting the copy of an abandoned move failed; it is deleted at the next start", "topic", t.String(), "err", err)
			continue
		}
		m.log.Info("deleted the copy of an abandoned move", "topic", t.String())
	}
}

// startMove marks bundle b as being moved by this broker (false if it already is); endMove unmarks it.
// endOrphanedMoves leaves the moves marked here alone.
func (m *clusterMember) startMove(b cluster.Bundle) bool {
	m.movesMu.Lock()
	defer m.movesMu.Unlock()
	if m.moves[b] {
		return false
	}
	if m.moves == nil {
		m.moves = map[cluster.Bundle]bool{}
	}
	m.moves[b] = true
	return true
}

func (m *clusterMember) endMove(b cluster.Bundle) {
	m.movesMu.Lock()
	defer m.movesMu.Unlock()
	delete(m.moves, b)
}

// orphanCheckInterval is how often a broker looks for moves of its bundles that no move here drives.
var orphanCheckInterval = 10 * time.Second

// endOrphanedMoves ends, until ctx ends, the moves of this broker's bundles that nothing here drives:
// a begin whose result was lost (the context ended while etcd applied it), or an abort that failed.
// Such a bundle would otherwise be held until this broker restarts.
func (m *clusterMember) endOrphanedMoves(ctx context.Context) {
	t := time.NewTicker(orphanCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, b := range m.coord.MovingBundles() {
			m.movesMu.Lock()
			driven := m.moves[b]
			m.movesMu.Unlock()
			if driven {
				continue
			}
			if err := m.coord.AbortHandOver(ctx, b); err != nil {
				m.log.Warn("ending a move nothing drives failed; trying again", "bundle", b.String(), "err", err)
				continue
			}
			m.log.Warn("ended a move of this broker's bundle that nothing drove", "bundle", b.String())
		}
	}
}
