package replication

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/mtypes"
)

// Advertised positions (docs/replication-design.md, "Advertised positions"): about once a second a
// source tells each replication target, for every topic written since the previous advertisement,
// its last stored position and its backlog to that target. Idle topics cost nothing, and nothing is
// appended to any log: the advertisement goes to the target's admin API, and the target keeps it in
// memory. After an unplanned failover the target can say what the source held that it never
// received.

// DefaultAdvertiseInterval is ManagerOptions.AdvertiseInterval's default.
const DefaultAdvertiseInterval = time.Second

// maxAdvertisedTopics bounds what a target keeps of all sources' advertisements (a source that
// advertises more topics than this has the excess refused, with a log line).
const maxAdvertisedTopics = 100_000

// advertiser decides what each advertisement carries: the topics whose last stored position moved
// since it was last sent to that remote. It is owned by the advertising goroutine.
type advertiser struct {
	sent map[Key]mtypes.Position
}

// replicatorView is what the advertiser reads of one running replicator. The backlog is read
// only for a topic that moved (stats), so an idle topic costs one position read a second.
type replicatorView struct {
	key   Key
	last  mtypes.Position
	stats func() (backlog, backlogBytes int64)
}

// due groups the replicators whose topic moved since the last advertisement to their remote, per
// remote, and forgets replicators that no longer run.
func (a *advertiser) due(source string, now time.Time, views []replicatorView) map[string]adminapi.ReplicationAdvertisement {
	out := map[string]adminapi.ReplicationAdvertisement{}
	seen := make(map[Key]bool, len(views))
	for _, v := range views {
		seen[v.key] = true
		if prev, ok := a.sent[v.key]; ok && prev == v.last {
			continue
		}
		adv, ok := out[v.key.Remote]
		if !ok {
			adv = adminapi.ReplicationAdvertisement{Source: source, Timestamp: now.UnixMilli(), Topics: map[string]adminapi.AdvertisedTopic{}}
		}
		backlog, backlogBytes := v.stats()
		adv.Topics[v.key.Topic] = adminapi.AdvertisedTopic{LastPosition: v.last.String(), Backlog: backlog, BacklogBytes: backlogBytes}
		out[v.key.Remote] = adv
	}
	for k := range a.sent {
		if !seen[k] {
			delete(a.sent, k)
		}
	}
	return out
}

// delivered records that remote received adv.
func (a *advertiser) delivered(remote string, adv adminapi.ReplicationAdvertisement) {
	for topic, t := range adv.Topics {
		if p, err := mtypes.ParsePosition(t.LastPosition); err == nil {
			a.sent[Key{Topic: topic, Remote: remote}] = p
		}
	}
}

// runAdvertiser advertises until ctx ends. Started by Start, it belongs to the Manager.
func (m *Manager) runAdvertiser(ctx context.Context) {
	defer close(m.advertiseDone)
	interval := m.opts.AdvertiseInterval
	if interval <= 0 {
		interval = DefaultAdvertiseInterval
	}
	a := advertiser{sent: map[Key]mtypes.Position{}}
	client := &http.Client{Timeout: 5 * time.Second}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			for remote, adv := range a.due(m.opts.Local, now, m.replicatorViews()) {
				if err := m.advertise(ctx, client, remote, adv); err != nil {
					m.log.Debug("advertising positions failed; retried next time", "remote_cluster", remote, "err", err)
					continue
				}
				a.delivered(remote, adv)
			}
		}
	}
}

func (m *Manager) replicatorViews() []replicatorView {
	m.mu.Lock()
	all := make(map[Key]*managed, len(m.running))
	for k, mg := range m.running {
		all[k] = mg
	}
	m.mu.Unlock()
	views := make([]replicatorView, 0, len(all))
	for k, mg := range all {
		if topicClosed(mg.topic) {
			continue
		}
		runner := mg.runner
		views = append(views, replicatorView{key: k, last: mg.topic.LastConfirmed(), stats: func() (int64, int64) {
			st := runner.Stats()
			return st.ReplicationBacklog, st.ReplicationBacklogBytes
		}})
	}
	return views
}

// advertise POSTs adv to remote's admin API, over the replication link's TLS and with its
// credentials (the remote cluster's data, else the broker's defaults: linksecurity.go), like the link's other admin calls.
func (m *Manager) advertise(ctx context.Context, base *http.Client, remote string, adv adminapi.ReplicationAdvertisement) error {
	data, ok := m.opts.Policies.Cluster(remote)
	if !ok {
		return fmt.Errorf("%s is not registered", remote)
	}
	link, err := linkConfigOf(remote, data, m.opts.LinkDefaults)
	if err != nil {
		return err
	}
	if link.adminURL == "" {
		return fmt.Errorf("%s has no serviceUrl registered", remote)
	}
	client := link.httpClient(base)
	body, err := json.Marshal(adv)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(link.adminURL, "/")+"/admin/v2/replication/advertisements", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}

// advertisement is what a target keeps of one source's topic.
type advertisement struct {
	adminapi.AdvertisedTopic
	advertisedAt, receivedAt int64
}

// sourceAdvertisements holds what sources advertised to this cluster, under its own mutex (written
// by admin requests, read by admin requests).
type sourceAdvertisements struct {
	mu     sync.Mutex
	topics map[Key]advertisement // Key{Topic, Remote: source}
}

// ReceiveAdvertisement keeps a source's advertisement (the admin API's POST).
func (m *Manager) ReceiveAdvertisement(adv adminapi.ReplicationAdvertisement) error {
	if adv.Source == "" || adv.Source == m.opts.Local {
		return fmt.Errorf("advertisement from %q: not another cluster", adv.Source)
	}
	now := time.Now().UnixMilli()
	s := &m.advertised
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.topics == nil {
		s.topics = map[Key]advertisement{}
	}
	for topic, t := range adv.Topics {
		if _, err := mtypes.ParsePosition(t.LastPosition); err != nil {
			return fmt.Errorf("advertised position of %s: %w", topic, err)
		}
		k := Key{Topic: topic, Remote: adv.Source}
		if _, known := s.topics[k]; !known && len(s.topics) >= maxAdvertisedTopics {
			return fmt.Errorf("advertisements of more than %d topics: refused", maxAdvertisedTopics)
		}
		s.topics[k] = advertisement{AdvertisedTopic: t, advertisedAt: adv.Timestamp, receivedAt: now}
	}
	return nil
}

// AdvertisedTopics lists the topics of namespace ("tenant/ns") some source advertised.
func (m *Manager) AdvertisedTopics(namespace string) []string {
	s := &m.advertised
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	for k := range s.topics {
		if namespaceOf(k.Topic) == namespace {
			seen[k.Topic] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// SourceStates lists what sources advertised for the topics of namespace ("tenant/ns"), with how
// much has arrived here since (through the topics' inbound indexes; load the topics first for an
// answer).
func (m *Manager) SourceStates(namespace string) []adminapi.SourceTopicState {
	s := &m.advertised
	s.mu.Lock()
	var out []adminapi.SourceTopicState
	for k, a := range s.topics {
		if namespaceOf(k.Topic) != namespace {
			continue
		}
		out = append(out, adminapi.SourceTopicState{Source: k.Remote, Topic: k.Topic, AdvertisedTopic: a.AdvertisedTopic,
			AdvertisedAt: a.advertisedAt, ReceivedAt: a.receivedAt})
	}
	s.mu.Unlock()
	for i := range out {
		m.estimateMissing(&out[i])
	}
	return out
}

// estimateMissing compares the advertised last position with the last one of the source stored here.
func (m *Manager) estimateMissing(st *adminapi.SourceTopicState) {
	st.Missing, st.MissingExact = st.Backlog, false
	adv, err := mtypes.ParsePosition(st.LastPosition)
	if err != nil {
		return
	}
	m.mu.Lock()
	x := m.indexes[st.Topic]
	m.mu.Unlock()
	if x == nil {
		return
	}
	origin, _, ok := x.LocalAtOrBefore(st.Source, adv)
	if !ok {
		return
	}
	st.ArrivedThrough = origin.String()
	switch {
	case origin.Compare(adv) >= 0:
		st.Missing, st.MissingExact = 0, true
	case origin.LedgerID == adv.LedgerID:
		st.Missing, st.MissingExact = adv.EntryID-origin.EntryID, true
	}
}
