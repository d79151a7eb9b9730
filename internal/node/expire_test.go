package node

import (
	"context"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
)

// TestExpireMessagesRefusesAnAgeThatOverflows: expireMessages/{seconds} takes a Java int of seconds,
// as Pulsar's does. A larger age is refused (400) and acknowledges nothing: 18446744074 s wrapped to
// 290 ms and 9223372037 s to a negative age when multiplied into nanoseconds, and either expired the
// whole backlog. An age that reaches the broker anyway (math.MaxInt64 s, past the API) is at most
// the longest duration, so nothing is old enough to expire.
func TestExpireMessagesRefusesAnAgeThatOverflows(t *testing.T) {
	n := startNode(t, testOptions(t, t.TempDir()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const topic = "persistent://public/default/expire-overflow"
	publishWithBacklog(t, ctx, n.ServiceURL(), topic, 3)
	topicURL := n.WebURL() + "/admin/v2/persistent/public/default/expire-overflow"
	backlog := func() int64 {
		t.Helper()
		var st adminapi.TopicStats
		getJSON(t, topicURL+"/stats", &st)
		return st.Subscriptions["s1"].MsgBacklog
	}
	time.Sleep(400 * time.Millisecond) // the messages are older than the 290 ms that 18446744074 s wrapped to

	for _, secs := range []string{"18446744074", "9223372037", "2147483648"} {
		for _, url := range []string{topicURL + "/subscription/s1/expireMessages/" + secs, topicURL + "/all_subscription/expireMessages/" + secs} {
			if code, body := adminCall(t, http.MethodPost, url, ""); code != http.StatusBadRequest {
				t.Errorf("POST %s: %d %s, want 400", url, code, body)
			}
			if b := backlog(); b != 3 {
				t.Fatalf("backlog after POST %s: %d, want 3", url, b)
			}
		}
	}
	adminJSON(t, http.MethodPost, topicURL+"/subscription/s1/expireMessages/2147483647", "", http.StatusNoContent, nil)
	if b := backlog(); b != 3 {
		t.Fatalf("backlog after expiring messages older than 2147483647 s: %d, want 3", b)
	}

	c := &n.components
	svc := topicService{broker: c.broker, cat: c.catalog, repl: c.replication, schema: c.schemas}
	if err := svc.ExpireMessages(ctx, topic, "s1", math.MaxInt64); err != nil {
		t.Fatalf("ExpireMessages(math.MaxInt64 s): %v", err)
	}
	if b := backlog(); b != 3 {
		t.Fatalf("backlog after ExpireMessages(math.MaxInt64 s): %d, want 3", b)
	}
	adminJSON(t, http.MethodPost, topicURL+"/subscription/s1/expireMessages/0", "", http.StatusNoContent, nil)
	if b := backlog(); b != 0 {
		t.Fatalf("backlog after expiring messages older than 0 s: %d, want 0", b)
	}
	http.DefaultClient.CloseIdleConnections()
}
