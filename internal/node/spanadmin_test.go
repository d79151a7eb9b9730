package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/admin"
	"github.com/meridian-mq/meridian/internal/client"
	"github.com/meridian-mq/meridian/internal/config"
	"github.com/meridian-mq/meridian/internal/metadata/memstore"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/poll"
)

// spreadTopic creates, through b1's admin API (with token, "" for none), a partitioned topic of
// public/default whose partitions both brokers serve, and returns it with its partitions.
func spreadTopic(t *testing.T, n1 *Node, token, prefix string, partitions int) (naming.TopicName, []naming.TopicName) {
	t.Helper()
	member := n1.components.member
	// Bundles are assigned to live brokers: b2 must be among them before the first is.
	poll.Until(t, 10*time.Second, "b1 to see both brokers", func() bool { return len(member.coord.Brokers()) >= 2 })
	for i := range 20 {
		base, _ := naming.ParseTopic(fmt.Sprintf("persistent://public/default/%s-%d", prefix, i))
		if code, body := adminCallAs(t, token, http.MethodPut, n1.WebURL()+"/admin/v2/"+base.RESTPath()+"/partitions", fmt.Sprint(partitions)); code != http.StatusNoContent {
			t.Fatalf("create %s: %d %s", base, code, body)
		}
		parts := make([]naming.TopicName, partitions)
		local := 0
		for p := range parts {
			parts[p] = base.Partition(p)
			if member.Serves(parts[p]) {
				local++
			}
		}
		if local > 0 && local < partitions {
			return base, parts
		}
	}
	t.Fatal("no partitioned topic has partitions on both brokers")
	return naming.TopicName{}, nil
}

// adminCall sends one admin request (following redirects to a topic's owner) and returns the
// status and body.
func adminCall(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	return adminCallAs(t, "", method, url, body)
}

// adminCallAs is adminCall with a bearer token ("": none).
func adminCallAs(t *testing.T, token, method, url, body string) (int, string) {
	t.Helper()
	var in io.Reader
	if body != "" {
		in = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, in)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// adminJSON is adminCall expecting want, decoding the answer into out.
func adminJSON(t *testing.T, method, url, body string, want int, out any) {
	t.Helper()
	code, b := adminCall(t, method, url, body)
	if code != want {
		t.Fatalf("%s %s: %d %s, want %d", method, url, code, b, want)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(b), out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, url, err, b)
		}
	}
}

// backlogs reads every partition's backlog of sub through b1's partitioned-stats (-1: the
// partition has no such subscription).
func backlogs(t *testing.T, n1 *Node, base naming.TopicName, parts []naming.TopicName, sub string) []int64 {
	t.Helper()
	var st adminapi.PartitionedTopicStats
	adminJSON(t, http.MethodGet, n1.WebURL()+"/admin/v2/"+base.RESTPath()+"/partitioned-stats?perPartition=true", "", http.StatusOK, &st)
	out := make([]int64, len(parts))
	for i, p := range parts {
		s, ok := st.Partitions[p.String()].Subscriptions[sub]
		if !ok {
			out[i] = -1
			continue
		}
		out[i] = s.MsgBacklog
	}
	return out
}

func wantBacklogs(t *testing.T, what string, got []int64, want int64) {
	t.Helper()
	for i, b := range got {
		if b != want {
			t.Fatalf("%s: partition %d has backlog %d, want %d (all: %v)", what, i, b, want, got)
		}
	}
}

// TestAdminCallsSpanTheBrokersOfACluster: on a partitioned topic whose partitions two brokers
// serve, the admin calls made through one broker act on (or report) every partition, and the
// namespace's backlog operations reach the topics of both brokers.
func TestAdminCallsSpanTheBrokersOfACluster(t *testing.T) {
	n1, n2 := startPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const partitions, perPartition = 8, 3
	base, parts := spreadTopic(t, n1, "", "spread", partitions)
	topicURL := n1.WebURL() + "/admin/v2/" + base.RESTPath()
	nsURL := n1.WebURL() + "/admin/v2/namespaces/public/default"

	subs := []string{"cleared", "expired", "rewound", "nscleared", "unsubscribed"}
	for _, sub := range subs {
		adminJSON(t, http.MethodPut, topicURL+"/subscription/"+sub, "", http.StatusNoContent, nil)
	}
	c, err := client.New(client.Options{ServiceURL: n1.ServiceURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, p := range parts {
		prod, err := c.CreateProducer(ctx, client.ProducerOptions{Topic: p.String()})
		if err != nil {
			t.Fatal(err)
		}
		for i := range perPartition {
			if _, err := prod.Send(ctx, client.ProducerMessage{Payload: fmt.Appendf(nil, "%s/%d", p.Local, i)}); err != nil {
				t.Fatal(err)
			}
		}
		prod.Close(ctx)
	}
	for _, sub := range subs {
		wantBacklogs(t, "after producing, "+sub, backlogs(t, n1, base, parts, sub), perPartition)
	}

	// partitioned-internalStats lists every partition, with its entries.
	var internal adminapi.PartitionedTopicInternalStats
	adminJSON(t, http.MethodGet, topicURL+"/partitioned-internalStats", "", http.StatusOK, &internal)
	if internal.Metadata.Partitions != partitions || len(internal.Partitions) != partitions {
		t.Fatalf("partitioned-internalStats: metadata %d partitions, %d partitions listed, want %d", internal.Metadata.Partitions, len(internal.Partitions), partitions)
	}
	for _, p := range parts {
		if st, ok := internal.Partitions[p.String()]; !ok || st.NumberOfEntries != perPartition || len(st.Cursors) != len(subs) {
			t.Fatalf("partitioned-internalStats of %s: listed %v, %d entries, %d cursors", p, ok, st.NumberOfEntries, len(st.Cursors))
		}
	}

	// Subscriptions of the partitioned topic: every partition's.
	var listed []string
	adminJSON(t, http.MethodGet, topicURL+"/subscriptions", "", http.StatusOK, &listed)
	if len(listed) != len(subs) {
		t.Fatalf("subscriptions %v, want %v", listed, subs)
	}

	// Clearing the backlog clears it on every partition.
	adminJSON(t, http.MethodPost, topicURL+"/subscription/cleared/skip_all", "", http.StatusNoContent, nil)
	wantBacklogs(t, "cleared", backlogs(t, n1, base, parts, "cleared"), 0)

	// Resetting to a time rewinds every partition.
	adminJSON(t, http.MethodPost, topicURL+"/subscription/cleared/resetcursor/0", "", http.StatusNoContent, nil)
	wantBacklogs(t, "rewound to time 0", backlogs(t, n1, base, parts, "cleared"), perPartition)

	// Expiring messages older than 0 s empties every partition's backlog (messages published in the
	// current millisecond may stay: the call repeats until every one is old enough).
	poll.UntilNil(t, 10*time.Second, "every partition's backlog to expire", func() error {
		adminJSON(t, http.MethodPost, topicURL+"/subscription/expired/expireMessages/0", "", http.StatusNoContent, nil)
		if got := backlogs(t, n1, base, parts, "expired"); !slicesAll(got, 0) {
			return fmt.Errorf("backlogs %v", got)
		}
		return nil
	})

	// Resetting to a message id names one partition: the one another broker serves moves.
	remote := -1
	for i, p := range parts {
		if !n1.components.member.Serves(p) {
			remote = i
			break
		}
	}
	var last adminapi.MessageID
	adminJSON(t, http.MethodGet, n1.WebURL()+"/admin/v2/"+parts[remote].RESTPath()+"/lastMessageId", "", http.StatusOK, &last)
	adminJSON(t, http.MethodPost, topicURL+"/subscription/rewound/resetcursor", fmt.Sprintf(`{"ledgerId":%d,"entryId":%d,"partitionIndex":%d}`, last.LedgerID, last.EntryID, remote), http.StatusNoContent, nil)
	wantRewound := func(what string) {
		t.Helper()
		for i, b := range backlogs(t, n1, base, parts, "rewound") {
			if want := map[bool]int64{true: 1, false: perPartition}[i == remote]; b != want {
				t.Fatalf("%s: partition %d has backlog %d, want %d (partition %d rewound to its last message)", what, i, b, want, remote)
			}
		}
	}
	wantRewound("reset to a message id")

	// The namespace's backlog operations reach both brokers' partitions.
	adminJSON(t, http.MethodPost, nsURL+"/clearBacklog/nscleared", "", http.StatusNoContent, nil)
	wantBacklogs(t, "namespace clearBacklog/nscleared", backlogs(t, n1, base, parts, "nscleared"), 0)
	wantRewound("namespace clearBacklog/nscleared leaves the other subscriptions")
	adminJSON(t, http.MethodPost, nsURL+"/unsubscribe/unsubscribed", "", http.StatusNoContent, nil)
	wantBacklogs(t, "namespace unsubscribe", backlogs(t, n1, base, parts, "unsubscribed"), -1)
	adminJSON(t, http.MethodPost, nsURL+"/clearBacklog", "", http.StatusNoContent, nil)
	for _, sub := range []string{"cleared", "rewound"} {
		wantBacklogs(t, "namespace clearBacklog, "+sub, backlogs(t, n1, base, parts, sub), 0)
	}

	// The namespace's unload closes every partition on its owner (each loads again on use).
	adminJSON(t, http.MethodPut, nsURL+"/unload", "", http.StatusNoContent, nil)
	for _, n := range []*Node{n1, n2} {
		for _, p := range parts {
			if n.components.broker.LoadedTopic(p) != nil {
				t.Fatalf("%s still has %s loaded after the namespace's unload", n.components.member.coord.Self().ID, p)
			}
		}
	}
}

func slicesAll(s []int64, v int64) bool {
	for _, x := range s {
		if x != v {
			return false
		}
	}
	return true
}

// TestTopicServiceForwardsToTheOwner: each single-topic call of b1's topic service on a partition
// b2 serves is answered by b2, with "not found" kept apart for topics, subscriptions and messages.
func TestTopicServiceForwardsToTheOwner(t *testing.T) {
	n1, n2 := startPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, parts := spreadTopic(t, n1, "", "single", 8)
	var remote naming.TopicName
	for _, p := range parts {
		if !n1.components.member.Serves(p) {
			remote = p
			break
		}
	}
	c1 := &n1.components
	svc := topicService{broker: c1.broker, cat: c1.catalog, repl: c1.replication, schema: c1.schemas, member: c1.member}
	topic := remote.String()
	if err := svc.CreateSubscription(ctx, topic, "s", adminapi.Earliest, false, nil); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(client.Options{ServiceURL: n1.ServiceURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	prod, err := c.CreateProducer(ctx, client.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	var ids []client.MessageID
	for i := range 5 {
		id, err := prod.Send(ctx, client.ProducerMessage{Payload: fmt.Appendf(nil, "m%d", i), Properties: map[string]string{"k": "v"}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	prod.Close(ctx)

	backlog := func() int64 {
		t.Helper()
		st, err := svc.TopicStats(ctx, topic, adminapi.GetStatsOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return st.Subscriptions["s"].MsgBacklog
	}
	if subs, err := svc.Subscriptions(ctx, topic); err != nil || len(subs) != 1 || subs[0] != "s" {
		t.Fatalf("Subscriptions: %v %v", subs, err)
	}
	if st, err := svc.InternalStats(ctx, topic); err != nil || st.NumberOfEntries != 5 {
		t.Fatalf("InternalStats: %d entries, %v", st.NumberOfEntries, err)
	}
	last, err := svc.LastMessageID(ctx, topic)
	if err != nil || last.LedgerID != int64(ids[4].LedgerID) || last.EntryID != int64(ids[4].EntryID) || last.PartitionIndex != remote.PartitionIndex {
		t.Fatalf("LastMessageID: %+v %v, want %v", last, err, ids[4])
	}
	if id, err := svc.MessageIDByTimestamp(ctx, topic, 0); err != nil || id.EntryID != int64(ids[0].EntryID) {
		t.Fatalf("MessageIDByTimestamp(0): %+v %v, want %v", id, err, ids[0])
	}
	m, err := svc.PeekMessage(ctx, topic, "s", 2)
	if err != nil || string(m.Payload) != "m1" || m.Properties["k"] != "v" || m.ID.PartitionIndex != remote.PartitionIndex {
		t.Fatalf("PeekMessage(2): %+v %v", m, err)
	}
	m, err = svc.GetMessageByID(ctx, topic, int64(ids[3].LedgerID), int64(ids[3].EntryID))
	if err != nil || string(m.Payload) != "m3" {
		t.Fatalf("GetMessageByID: %+v %v", m, err)
	}
	if err := svc.SkipMessages(ctx, topic, "s", 2); err != nil || backlog() != 3 {
		t.Fatalf("SkipMessages(2): %v, backlog %d", err, backlog())
	}
	if err := svc.ClearBacklog(ctx, topic, "s"); err != nil || backlog() != 0 {
		t.Fatalf("ClearBacklog: %v, backlog %d", err, backlog())
	}
	if err := svc.ResetCursor(ctx, topic, "s", adminapi.MessageID{LedgerID: int64(ids[1].LedgerID), EntryID: int64(ids[1].EntryID), PartitionIndex: remote.PartitionIndex}); err != nil || backlog() != 4 {
		t.Fatalf("ResetCursor: %v, backlog %d", err, backlog())
	}
	if err := svc.ExpireMessages(ctx, topic, "s", 3600); err != nil || backlog() != 4 {
		t.Fatalf("ExpireMessages(3600): %v, backlog %d", err, backlog())
	}
	if err := svc.ResetCursorToTime(ctx, topic, "s", 0); err != nil || backlog() != 5 {
		t.Fatalf("ResetCursorToTime(0): %v, backlog %d", err, backlog())
	}

	// Missing things stay told apart.
	if _, err := svc.PeekMessage(ctx, topic, "s", 6); !errors.Is(err, admin.ErrMessageNotFound) {
		t.Fatalf("PeekMessage past the end: %v, want ErrMessageNotFound", err)
	}
	if _, err := svc.GetMessageByID(ctx, topic, int64(ids[4].LedgerID), int64(ids[4].EntryID)+100); !errors.Is(err, admin.ErrMessageNotFound) {
		t.Fatalf("GetMessageByID of a missing entry: %v, want ErrMessageNotFound", err)
	}
	if err := svc.SkipMessages(ctx, topic, "nope", 1); !errors.Is(err, admin.ErrSubscriptionNotFound) {
		t.Fatalf("SkipMessages on a missing subscription: %v, want ErrSubscriptionNotFound", err)
	}
	if err := svc.ClearBacklog(ctx, topic, "nope"); !errors.Is(err, admin.ErrSubscriptionNotFound) {
		t.Fatalf("ClearBacklog on a missing subscription: %v, want ErrSubscriptionNotFound", err)
	}
	if err := svc.ExpireMessages(ctx, topic, "s", -1); !errors.Is(err, admin.ErrInvalidArgument) {
		t.Fatalf("ExpireMessages(-1): %v", err)
	}

	if n2.components.broker.LoadedTopic(remote) == nil {
		t.Fatal("the partition is not loaded on its owner")
	}
	if err := svc.Unload(ctx, topic); err != nil || n2.components.broker.LoadedTopic(remote) != nil {
		t.Fatalf("Unload: %v, still loaded on its owner: %v", err, n2.components.broker.LoadedTopic(remote) != nil)
	}
	id, err := svc.Terminate(ctx, topic)
	if err != nil || id.EntryID != int64(ids[4].EntryID) {
		t.Fatalf("Terminate: %+v %v, want %v", id, err, ids[4])
	}
	if _, err := c.CreateProducer(ctx, client.ProducerOptions{Topic: topic}); err == nil {
		t.Fatal("a producer was accepted on the terminated topic")
	}
}

// TestAdminCallsSpanTheBrokersWithTheCallersToken: with token authentication, the calls a broker
// makes on the caller's behalf to the owners of a partitioned topic's partitions and of a
// namespace's topics carry the caller's token, so the owners accept them.
func TestAdminCallsSpanTheBrokersWithTheCallersToken(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	store := memstore.New()
	t.Cleanup(func() { _ = store.Close() })
	var nodes []*Node
	for i := 1; i <= 2; i++ {
		o := testOptions(t, t.TempDir())
		o.SharedMetadataStore = store
		o.BrokerID = fmt.Sprintf("b%d", i)
		o.LoadSheddingInterval, o.HandOverTimeout = -1, -1
		o.Auth = config.DefaultAuth()
		o.Auth.AuthenticationEnabled = true
		o.Auth.Providers = []config.AuthProvider{config.AuthProviderToken}
		var err error
		if o.Auth.TokenSecretKey, err = config.ParseKeySource("data:," + string(secret)); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, startNode(t, o))
	}
	n1 := nodes[0]
	token, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "admin"}).SignedString(secret)
	if err != nil {
		t.Fatal(err)
	}
	call := func(method, url string, want int) string {
		t.Helper()
		code, body := adminCallAs(t, token, method, url, "")
		if code != want {
			t.Fatalf("%s %s: %d %s, want %d", method, url, code, body, want)
		}
		return body
	}
	base, _ := spreadTopic(t, n1, token, "authspread", 8)
	topicURL := n1.WebURL() + "/admin/v2/" + base.RESTPath()
	call(http.MethodPut, topicURL+"/subscription/kept", http.StatusNoContent)
	call(http.MethodPut, topicURL+"/subscription/gone", http.StatusNoContent)
	call(http.MethodPost, topicURL+"/subscription/kept/skip_all", http.StatusNoContent)
	call(http.MethodPost, topicURL+"/subscription/kept/expireMessages/0", http.StatusNoContent)
	call(http.MethodPost, n1.WebURL()+"/admin/v2/namespaces/public/default/clearBacklog", http.StatusNoContent)
	call(http.MethodPost, n1.WebURL()+"/admin/v2/namespaces/public/default/unsubscribe/gone", http.StatusNoContent)
	call(http.MethodPut, n1.WebURL()+"/admin/v2/namespaces/public/default/unload", http.StatusNoContent)
	var internal adminapi.PartitionedTopicInternalStats
	if err := json.Unmarshal([]byte(call(http.MethodGet, topicURL+"/partitioned-internalStats", http.StatusOK)), &internal); err != nil {
		t.Fatal(err)
	}
	for p := range 8 {
		cursors := internal.Partitions[base.Partition(p).String()].Cursors
		if _, kept := cursors["kept"]; !kept || len(cursors) != 1 {
			t.Fatalf("partition %d has the subscriptions %v, want only kept", p, cursors)
		}
	}
	http.DefaultClient.CloseIdleConnections()
}
