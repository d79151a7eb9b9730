package admin_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/admin"
)

// fakeTopics is a small in-memory TopicService for handler tests (the real broker is adapted to the
// interface by internal/node and exercised end to end in tests/).
type fakeTopics struct {
	mu     sync.Mutex
	topics map[string]*fakeTopic
}

type fakeTopic struct {
	subs     map[string]int64 // subscription -> backlog
	subProps map[string]map[string]string
	subRepl  map[string]bool
	props    map[string]string
	entries  int64
	unloaded int
}

func newFakeTopics() *fakeTopics { return &fakeTopics{topics: map[string]*fakeTopic{}} }

func (f *fakeTopics) get(topic string) (*fakeTopic, error) {
	t, ok := f.topics[topic]
	if !ok {
		return nil, fmt.Errorf("fake: %s: %w", topic, admin.ErrTopicNotFound)
	}
	return t, nil
}

func (f *fakeTopics) ListTopics(_ context.Context, ns string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for name := range f.topics {
		if i := strings.Index(name, "://"); i >= 0 && strings.HasPrefix(name[i+3:], ns+"/") {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out, nil
}

func (f *fakeTopics) CreateTopic(_ context.Context, topic string, props map[string]string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.topics[topic]; ok {
		return admin.ErrTopicExists
	}
	f.topics[topic] = &fakeTopic{subs: map[string]int64{}, props: props}
	return nil
}

func (f *fakeTopics) DeleteTopic(_ context.Context, topic string, force bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.get(topic); err != nil {
		return err
	}
	delete(f.topics, topic)
	return nil
}

func (f *fakeTopics) TopicStats(_ context.Context, topic string, _ adminapi.GetStatsOptions) (adminapi.TopicStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.get(topic)
	if err != nil {
		return adminapi.TopicStats{}, err
	}
	st := adminapi.TopicStats{
		MsgRateIn: 10, MsgInCounter: t.entries, BytesInCounter: t.entries * 100, StorageSize: t.entries * 100,
		TopicCreationTimeStamp: 1000, Subscriptions: map[string]adminapi.SubscriptionStats{},
		Replication: map[string]adminapi.ReplicatorStats{"west": {ReplicationBacklog: 3, Connected: false, LastError: "connection refused"}},
	}
	for s, backlog := range t.subs {
		st.Subscriptions[s] = adminapi.SubscriptionStats{MsgBacklog: backlog, Type: "Exclusive", IsDurable: true}
	}
	return st, nil
}

func (f *fakeTopics) InternalStats(_ context.Context, topic string) (adminapi.PersistentTopicInternalStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.get(topic)
	if err != nil {
		return adminapi.PersistentTopicInternalStats{}, err
	}
	return adminapi.PersistentTopicInternalStats{NumberOfEntries: t.entries, LastConfirmedEntry: fmt.Sprintf("1:%d", t.entries-1)}, nil
}

func (f *fakeTopics) LastMessageID(_ context.Context, topic string) (adminapi.MessageID, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.get(topic)
	if err != nil {
		return adminapi.MessageID{}, err
	}
	return adminapi.MessageID{LedgerID: 1, EntryID: t.entries - 1, PartitionIndex: -1}, nil
}

func (f *fakeTopics) MessageIDByTimestamp(_ context.Context, topic string, ts int64) (adminapi.MessageID, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.get(topic); err != nil {
		return adminapi.MessageID{}, err
	}
	return adminapi.MessageID{LedgerID: 1, EntryID: ts % 10, PartitionIndex: -1}, nil
}

func (f *fakeTopics) Unload(_ context.Context, topic string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.get(topic)
	if err != nil {
		return err
	}
	t.unloaded++
	return nil
}

func (f *fakeTopics) Subscriptions(_ context.Context, topic string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.get(topic)
	if err != nil {
		return nil, err
	}
	var out []string
	for s := range t.subs {
		out = append(out, s)
	}
	sort.Strings(out)
	return out, nil
}

func (f *fakeTopics) CreateSubscription(_ context.Context, topic, sub string, start adminapi.MessageID, replicated bool, props map[string]string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.get(topic)
	if err != nil {
		return err
	}
	if _, ok := t.subs[sub]; ok {
		return admin.ErrSubscriptionExists
	}
	backlog := int64(0)
	if start.IsEarliest() {
		backlog = t.entries
	}
	t.subs[sub] = backlog
	if t.subProps == nil {
		t.subProps = map[string]map[string]string{}
	}
	t.subProps[sub] = props
	if replicated {
		if t.subRepl == nil {
			t.subRepl = map[string]bool{}
		}
		t.subRepl[sub] = true
	}
	return nil
}

func (f *fakeTopics) SubscriptionProperties(_ context.Context, topic, sub string) (map[string]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.sub(topic, sub)
	if err != nil {
		return nil, err
	}
	return t.subProps[sub], nil
}

func (f *fakeTopics) SetSubscriptionProperties(_ context.Context, topic, sub string, props map[string]string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.sub(topic, sub)
	if err != nil {
		return err
	}
	t.subProps[sub] = props
	return nil
}

func (f *fakeTopics) SubscriptionReplicated(_ context.Context, topic, sub string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.sub(topic, sub)
	if err != nil {
		return false, err
	}
	return t.subRepl[sub], nil
}

func (f *fakeTopics) SetSubscriptionReplicated(_ context.Context, topic, sub string, enabled bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.sub(topic, sub)
	if err != nil {
		return err
	}
	if t.subRepl == nil {
		t.subRepl = map[string]bool{}
	}
	t.subRepl[sub] = enabled
	return nil
}

func (f *fakeTopics) sub(topic, sub string) (*fakeTopic, error) {
	t, err := f.get(topic)
	if err != nil {
		return nil, err
	}
	if _, ok := t.subs[sub]; !ok {
		return nil, admin.ErrSubscriptionNotFound
	}
	return t, nil
}

func (f *fakeTopics) DeleteSubscription(_ context.Context, topic, sub string, _ bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.sub(topic, sub)
	if err != nil {
		return err
	}
	delete(t.subs, sub)
	return nil
}

func (f *fakeTopics) setBacklog(topic, sub string, fn func(t *fakeTopic, b int64) int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.sub(topic, sub)
	if err != nil {
		return err
	}
	t.subs[sub] = fn(t, t.subs[sub])
	return nil
}

func (f *fakeTopics) ResetCursor(_ context.Context, topic, sub string, id adminapi.MessageID) error {
	return f.setBacklog(topic, sub, func(t *fakeTopic, _ int64) int64 { return t.entries - id.EntryID })
}

func (f *fakeTopics) ResetCursorToTime(_ context.Context, topic, sub string, _ int64) error {
	return f.setBacklog(topic, sub, func(t *fakeTopic, _ int64) int64 { return t.entries })
}

func (f *fakeTopics) SkipMessages(_ context.Context, topic, sub string, n int64) error {
	return f.setBacklog(topic, sub, func(_ *fakeTopic, b int64) int64 { return max(0, b-n) })
}

func (f *fakeTopics) ClearBacklog(_ context.Context, topic, sub string) error {
	return f.setBacklog(topic, sub, func(*fakeTopic, int64) int64 { return 0 })
}

func (f *fakeTopics) ExpireMessages(_ context.Context, topic, sub string, _ int64) error {
	return f.setBacklog(topic, sub, func(*fakeTopic, int64) int64 { return 0 })
}

func (f *fakeTopics) PeekMessage(_ context.Context, topic, sub string, n int) (adminapi.RawMessage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.sub(topic, sub)
	if err != nil {
		return adminapi.RawMessage{}, err
	}
	if int64(n) > t.subs[sub] {
		return adminapi.RawMessage{}, admin.ErrMessageNotFound
	}
	return adminapi.RawMessage{
		ID:      adminapi.MessageID{LedgerID: 1, EntryID: t.entries - t.subs[sub] + int64(n) - 1, PartitionIndex: -1, BatchIndex: -1},
		Payload: []byte(fmt.Sprintf("message-%d", n)), PublishTime: 1700000000000,
		Properties: map[string]string{"k": "v"}, ProducerName: "p1", SequenceID: int64(n),
	}, nil
}

func (f *fakeTopics) GetMessageByID(_ context.Context, topic string, ledger, entry int64) (adminapi.RawMessage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.get(topic)
	if err != nil {
		return adminapi.RawMessage{}, err
	}
	if ledger != 1 || entry < 0 || entry >= t.entries {
		return adminapi.RawMessage{}, admin.ErrMessageNotFound
	}
	return adminapi.RawMessage{ID: adminapi.MessageID{LedgerID: 1, EntryID: entry, PartitionIndex: -1, BatchIndex: -1}, Payload: []byte("x")}, nil
}

func (f *fakeTopics) addEntries(topic string, n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.topics[topic]
	t.entries += n
	for s := range t.subs {
		t.subs[s] += n
	}
}

func (f *fakeTopics) Terminate(_ context.Context, topic string) (adminapi.MessageID, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.get(topic)
	if err != nil {
		return adminapi.MessageID{}, err
	}
	return adminapi.MessageID{LedgerID: 1, EntryID: t.entries - 1, PartitionIndex: -1}, nil
}
