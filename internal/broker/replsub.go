package broker

import (
	"context"
	"errors"
	"log/slog"
)

// Replicated subscriptions (docs/replication-design.md, "Replicated subscriptions"): a subscription
// is replicated when its own flag is set (a consumer's replicate_subscription_state, the admin API)
// or while a namespace or topic policy says so. The broker keeps the flag and its persisted state;
// the sync itself (state markers in the log, their translation on the remote) is the replication
// layer's, reached through Deps.SubscriptionSync.

// replicateByPolicy reports whether the topic's policies make its durable subscriptions replicated.
func (t *topicState) replicateByPolicy() bool { return t.replicateAll.Load() }

// isReplicated reports whether the subscription is replicated: a durable subscription with its own
// flag set, or on a topic whose policy makes every durable subscription replicated.
func (s *subscriptionState) isReplicated() bool {
	return s.durable && (s.replicated.Load() || s.topic.replicateByPolicy())
}

// setReplicated sets the subscription's own flag and persists it before returning.
func (s *subscriptionState) setReplicated(ctx context.Context, on bool) error {
	if !s.durable {
		return errors.New("a non-durable subscription cannot be replicated: " + s.name)
	}
	if s.replicated.Swap(on) != on {
		s.mu.Lock()
		s.stateChanged = true
		s.mu.Unlock()
	}
	if err := s.saveState(ctx); err != nil {
		return err
	}
	if on {
		s.topic.b.syncChanged(s, true)
	}
	return nil
}

// setPolicies installs new policies and applies what changed.
func (t *topicState) setPolicies(ctx context.Context, pol TopicPolicies) error {
	t.mu.Lock()
	t.policies = pol
	t.mu.Unlock()
	wasReplicating := t.replicateAll.Swap(pol.ReplicateSubscriptions != nil && *pol.ReplicateSubscriptions)
	if t.nonPersistent() {
		return nil
	}
	t.ledger.SetRetention(pol.RetentionTime, pol.RetentionSizeBytes)
	if !wasReplicating && t.replicateByPolicy() {
		// Subscriptions the policy just made replicated: their state is synced from now on.
		for _, s := range t.subscribers() {
			if s.isReplicated() {
				t.b.syncChanged(s, true)
			}
		}
	}
	return t.applyDedupPolicy(ctx)
}

// SubscriptionReplicated reports whether a subscription is replicated (ErrSubscriptionNotFound if
// it does not exist).
func (t *Topic) SubscriptionReplicated(name string) (bool, error) {
	s, err := t.t.subscription(name)
	if err != nil {
		return false, err
	}
	return s.isReplicated(), nil
}

// SetSubscriptionReplicated sets a subscription's own replicated flag (admin
// replicatedSubscriptionStatus) and persists it before returning. A policy that makes every
// subscription of the topic replicated keeps it replicated while the policy is in force.
func (t *Topic) SetSubscriptionReplicated(ctx context.Context, name string, on bool) error {
	s, err := t.t.subscription(name)
	if err != nil {
		return err
	}
	if err := s.setReplicated(ctx, on); err != nil {
		t.t.b.log.Warn("replicated flag not persisted", slog.String("topic", t.t.name.String()),
			slog.String("subscription", name), slog.Any("err", err))
		return err
	}
	return nil
}
