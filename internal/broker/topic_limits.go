package broker

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// A topic's message expiry (TTL) and backlog quotas.

// expireMessages acknowledges entries older than age on one subscription.
func (t *topicState) expireMessages(ctx context.Context, name string, age time.Duration) error {
	if err := t.needStorage(); err != nil {
		return err
	}
	s, err := t.subscription(name)
	if err != nil {
		return err
	}
	return s.expire(ctx, t.b.nowMs()-age.Milliseconds())
}

// expireSubscriptions deletes durable subscriptions without consumers for longer than the
// subscription expiration policy.
func (t *topicState) expireSubscriptions(ctx context.Context) {
	t.mu.Lock()
	limit := t.policies.SubscriptionExpiration
	subs := make([]*subscriptionState, 0, len(t.subs))
	for _, s := range t.subs {
		subs = append(subs, s)
	}
	t.mu.Unlock()
	if limit <= 0 || t.nonPersistent() {
		return
	}
	cutoff := t.b.nowMs() - limit.Milliseconds()
	for _, s := range subs {
		if !s.durable || s.isReplicated() || s.lastActive.Load() > cutoff {
			continue
		}
		s.opMu.Lock()
		s.mu.Lock()
		idle := len(s.consumers) == 0
		s.mu.Unlock()
		var err error
		if idle {
			err = s.deleteLocked(ctx, nil)
		}
		s.opMu.Unlock()
		if err != nil {
			t.b.log.Warn("expiring subscription failed", slog.String("topic", t.name.String()), slog.String("subscription", s.name), slog.Any("err", err))
		} else if idle {
			t.b.log.Info("subscription expired", slog.String("topic", t.name.String()), slog.String("subscription", s.name))
		}
	}
}

// expireAll applies the message TTL policy to every subscription.
func (t *topicState) expireAll(ctx context.Context) {
	t.expireSubscriptions(ctx)
	t.mu.Lock()
	ttl := t.policies.MessageTTL
	subs := make([]*subscriptionState, 0, len(t.subs))
	for _, s := range t.subs {
		subs = append(subs, s)
	}
	t.mu.Unlock()
	if ttl <= 0 || t.nonPersistent() {
		return
	}
	cutoff := t.b.nowMs() - ttl.Milliseconds()
	for _, s := range subs {
		if err := s.expire(ctx, cutoff); err != nil {
			t.b.log.Warn("message TTL expiry failed", slog.String("topic", t.name.String()), slog.String("subscription", s.name), slog.Any("err", err))
		}
	}
}

// Backlog quota policies (Pulsar's names).
const (
	quotaProducerRequestHold     = "producer_request_hold"
	quotaProducerException       = "producer_exception"
	quotaConsumerBacklogEviction = "consumer_backlog_eviction"
)

// overQuota returns the subscriptions whose estimated backlog size exceeds the backlog quota,
// with the quota, the policy and the average entry size used for the estimate.
func (t *topicState) overQuota() (over []*subscriptionState, limit int64, policy string, avg int64) {
	t.mu.Lock()
	limit, policy = t.policies.BacklogQuotaLimitBytes, t.policies.BacklogQuotaPolicy
	subs := make([]*subscriptionState, 0, len(t.subs))
	for _, s := range t.subs {
		subs = append(subs, s)
	}
	t.mu.Unlock()
	if limit <= 0 || t.nonPersistent() {
		return nil, limit, policy, 0
	}
	entries := t.ledger.Entries()
	if entries == 0 {
		return nil, limit, policy, 0
	}
	avg = max(t.ledger.Bytes()/entries, 1)
	for _, s := range subs {
		if s.durable && s.cursor.Backlog()*avg > limit {
			over = append(over, s)
		}
	}
	return over, limit, policy, avg
}

// quotaError is the error refusing producers under a backlog quota policy.
func (t *topicState) quotaError(s *subscriptionState, limit, avg int64, policy string) error {
	sentinel := ErrProducerBlockedQuota
	if policy == quotaProducerException {
		sentinel = ErrProducerBlockedQuotaException
	}
	return fmt.Errorf("backlog of subscription %q (~%d bytes) exceeds the quota of %d bytes on %s: %w",
		s.name, s.cursor.Backlog()*avg, limit, t.name, sentinel)
}

// checkBacklogQuota refuses a new producer while a subscription's backlog exceeds the quota
// (replicators are exempt, as in Pulsar; consumer_backlog_eviction never refuses producers).
func (t *topicState) checkBacklogQuota(producerName string) error {
	if strings.HasPrefix(producerName, t.b.cfg.ReplicatorPrefix+".") {
		return nil
	}
	over, limit, policy, avg := t.overQuota()
	if len(over) == 0 || policy == quotaConsumerBacklogEviction {
		return nil
	}
	return t.quotaError(over[0], limit, avg, policy)
}

// enforceBacklogQuota applies the backlog quota policy (periodically): under the producer
// policies the connected producers (not replicators) are disconnected, and their re-creation is
// refused by checkBacklogQuota until the backlog shrinks; under consumer_backlog_eviction the
// oldest entries of each subscription over the quota are acknowledged until it fits.
func (t *topicState) enforceBacklogQuota(ctx context.Context) {
	over, limit, policy, avg := t.overQuota()
	if len(over) == 0 {
		return
	}
	if policy == quotaConsumerBacklogEviction {
		for _, s := range over {
			n := int(s.cursor.Backlog() - limit/avg)
			if err := t.skip(ctx, s.name, n); err != nil {
				t.b.log.Warn("backlog eviction failed", slog.String("topic", t.name.String()), slog.String("subscription", s.name), slog.Any("err", err))
				continue
			}
			t.b.log.Info("backlog quota exceeded: oldest messages evicted", slog.String("topic", t.name.String()),
				slog.String("subscription", s.name), slog.Int("entries", n))
		}
		return
	}
	t.mu.Lock()
	var evicted []*producerState
	for name, p := range t.producers {
		if !p.isReplicator {
			delete(t.producers, name)
			evicted = append(evicted, p)
		}
	}
	if len(t.producers) == 0 {
		t.exclusive = false
	}
	t.mu.Unlock()
	if len(evicted) > 0 {
		t.b.log.Info("backlog quota exceeded: producers disconnected", slog.String("topic", t.name.String()),
			slog.String("policy", policy), slog.Int("producers", len(evicted)), slog.Any("reason", t.quotaError(over[0], limit, avg, policy)))
		t.closeProducers(evicted)
	}
}
