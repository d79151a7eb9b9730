package node

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/meridian-mq/meridian/internal/admin"
	"github.com/meridian-mq/meridian/internal/broker"
)

// TestAdminErrSaysNotFoundOnce: the admin reason names what is missing once, in front, as Pulsar's
// reasons do.
func TestAdminErrSaysNotFoundOnce(t *testing.T) {
	for _, tc := range []struct {
		in       error
		sentinel error
		want     string
	}{
		{fmt.Errorf("topic %s: %w", "persistent://public/default/t", broker.ErrTopicNotFound), admin.ErrTopicNotFound,
			"Topic not found: topic persistent://public/default/t"},
		{fmt.Errorf("namespace %s does not exist: %w", "public/nope", broker.ErrNamespaceNotFound), admin.ErrTopicNotFound,
			"Topic not found: namespace public/nope does not exist"},
		{fmt.Errorf("subscription %s: %w", "s", broker.ErrSubscriptionNotFound), admin.ErrSubscriptionNotFound,
			"Subscription not found: subscription s"},
	} {
		got := adminErr(tc.in, nil)
		if !errors.Is(got, tc.sentinel) || got.Error() != tc.want {
			t.Errorf("adminErr(%q) = %q, want %q wrapping %v", tc.in, got, tc.want, tc.sentinel)
		}
		if n := strings.Count(strings.ToLower(got.Error()), "not found"); n != 1 {
			t.Errorf("adminErr(%q) = %q says 'not found' %d times", tc.in, got, n)
		}
	}
}
