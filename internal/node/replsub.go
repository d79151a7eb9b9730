package node

import (
	"context"

	"github.com/meridian-mq/meridian/internal/admin"
)

// Replicated subscriptions on the admin API (admin.ReplicatedSubscriptions).

var _ admin.ReplicatedSubscriptions = topicService{}

func (s topicService) SubscriptionReplicated(ctx context.Context, topic, sub string) (bool, error) {
	t, _, err := s.topic(ctx, topic)
	if err != nil {
		return false, err
	}
	on, err := t.SubscriptionReplicated(sub)
	return on, adminErr(err, nil)
}

func (s topicService) SetSubscriptionReplicated(ctx context.Context, topic, sub string, enabled bool) error {
	t, _, err := s.topic(ctx, topic)
	if err != nil {
		return err
	}
	return adminErr(t.SetSubscriptionReplicated(ctx, sub, enabled), nil)
}
