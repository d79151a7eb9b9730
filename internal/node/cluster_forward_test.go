package node

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/meridian-mq/meridian/internal/admin"
)

// TestOwnerFailureKeepsTheKindAndReason: an owner's error answer becomes the sentinel its status
// and reason stand for, with the owner's reason as the text (so this broker answers the same).
func TestOwnerFailureKeepsTheKindAndReason(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		want   error // nil: no sentinel
		reason string
	}{
		{404, `{"reason":"Subscription not found"}`, admin.ErrSubscriptionNotFound, "Subscription not found"},
		{404, `{"reason":"Message not found: the backlog holds fewer than 6 entries"}`, admin.ErrMessageNotFound, "Message not found: the backlog holds fewer than 6 entries"},
		{404, `{"reason":"Topic not found"}`, admin.ErrTopicNotFound, "Topic not found"},
		{404, `{"reason":"Namespace does not exist"}`, admin.ErrTopicNotFound, "Namespace does not exist"},
		{404, ``, admin.ErrTopicNotFound, "Topic not found"},
		{409, `{"reason":"Subscription already exists for topic"}`, admin.ErrSubscriptionExists, "Subscription already exists for topic"},
		{412, `{"reason":"Subscription has active consumers"}`, admin.ErrSubscriptionBusy, "Subscription has active consumers"},
		{412, `{"reason":"Invalid subscription name"}`, admin.ErrInvalidArgument, "Invalid subscription name"},
		{503, `not json`, admin.ErrNotReady, "not json"},
		{400, `{"reason":"Invalid timestamp"}`, nil, "the owner at http://b2 answered 400: Invalid timestamp"},
	} {
		err := ownerFailure("http://b2", ownerAnswer{status: tc.status, body: []byte(tc.body)})
		if tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%d %s: %v, want %v", tc.status, tc.body, err, tc.want)
		}
		if err.Error() != tc.reason {
			t.Errorf("%d %s: reason %q, want %q", tc.status, tc.body, err.Error(), tc.reason)
		}
	}
	long := `{"reason":"Topic not found` + strings.Repeat("é", 2*maxOwnerReason) + `"}`
	err := ownerFailure("http://b2", ownerAnswer{status: 404, body: []byte(long)})
	if !errors.Is(err, admin.ErrTopicNotFound) || len(err.Error()) > maxOwnerReason || !utf8.ValidString(err.Error()) {
		t.Fatalf("a long reason: %d bytes, valid UTF-8 %v, %v", len(err.Error()), utf8.ValidString(err.Error()), errors.Is(err, admin.ErrTopicNotFound))
	}
}

// TestOwnerAnswerLongerThanTheBoundIsAnError: an answer over the bound is refused, never cut short
// (a cut message or JSON document would pass for a whole one).
func TestOwnerAnswerLongerThanTheBoundIsAnError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(strings.Repeat("x", 101)))
	}))
	defer srv.Close()
	m := &clusterMember{http: srv.Client()}
	if _, err := m.exchange(context.Background(), http.MethodGet, srv.URL, "/p", nil, nil, 100); err == nil || !strings.Contains(err.Error(), "more than 100 bytes") {
		t.Fatalf("101 bytes with a bound of 100: %v", err)
	}
	a, err := m.exchange(context.Background(), http.MethodGet, srv.URL, "/p", nil, nil, 101)
	if err != nil || len(a.body) != 101 {
		t.Fatalf("101 bytes with a bound of 101: %d bytes, %v", len(a.body), err)
	}
}
