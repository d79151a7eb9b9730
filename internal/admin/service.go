package admin

import (
	"context"
	"errors"

	"github.com/meridian-mq/meridian/adminapi"
)

// TopicService is what the admin API needs from the broker for topic and subscription operations.
// internal/node adapts the broker to it (the admin package never imports the broker). Topic names are
// fully qualified ("persistent://tenant/ns/local"); partitioned topics are handled here, so every name
// passed is a non-partitioned topic or one partition.
//
// Errors: wrap the sentinels below (fmt.Errorf("...: %w", admin.ErrTopicNotFound)) so the API answers
// with Pulsar's status; anything else is a 500 with the error text as reason.
type TopicService interface {
	// ListTopics returns the existing topics (non-partitioned topics and partitions) of a namespace
	// ("tenant/ns") in both domains.
	ListTopics(ctx context.Context, namespace string) ([]string, error)
	// CreateTopic creates a non-partitioned topic (or a partition). ErrTopicExists if it exists.
	CreateTopic(ctx context.Context, topic string, properties map[string]string) error
	// DeleteTopic deletes a topic and its data. Without force, ErrTopicBusy while producers or
	// consumers are connected; with force they are disconnected first.
	DeleteTopic(ctx context.Context, topic string, force bool) error
	// TopicStats returns the topic's stats (replication map included).
	TopicStats(ctx context.Context, topic string, opts adminapi.GetStatsOptions) (adminapi.TopicStats, error)
	// InternalStats returns the log and cursor state.
	InternalStats(ctx context.Context, topic string) (adminapi.PersistentTopicInternalStats, error)
	// LastMessageID returns the last stored message id (entryId -1 for an empty topic).
	LastMessageID(ctx context.Context, topic string) (adminapi.MessageID, error)
	// MessageIDByTimestamp returns the first message published at or after ts (ms); for a timestamp
	// after the last message, the position after it.
	MessageIDByTimestamp(ctx context.Context, topic string, ts int64) (adminapi.MessageID, error)
	// Unload closes the topic (clients reconnect; it loads again on next use).
	Unload(ctx context.Context, topic string) error

	// Subscriptions lists the topic's durable subscriptions.
	Subscriptions(ctx context.Context, topic string) ([]string, error)
	// CreateSubscription creates a durable subscription at start (adminapi.Latest, adminapi.Earliest
	// or a position). ErrSubscriptionExists if it exists.
	CreateSubscription(ctx context.Context, topic, sub string, start adminapi.MessageID, replicated bool, properties map[string]string) error
	// DeleteSubscription deletes it; without force, ErrSubscriptionBusy while consumers are attached.
	DeleteSubscription(ctx context.Context, topic, sub string, force bool) error
	// ResetCursor moves the subscription to id (the next message delivered is id itself).
	ResetCursor(ctx context.Context, topic, sub string, id adminapi.MessageID) error
	// ResetCursorToTime moves the subscription to the first message published at or after ts (ms).
	ResetCursorToTime(ctx context.Context, topic, sub string, ts int64) error
	// SkipMessages acknowledges the next n messages of the backlog.
	SkipMessages(ctx context.Context, topic, sub string, n int64) error
	// ClearBacklog acknowledges the whole backlog.
	ClearBacklog(ctx context.Context, topic, sub string) error
	// ExpireMessages acknowledges messages published more than seconds ago.
	ExpireMessages(ctx context.Context, topic, sub string, seconds int64) error
	// PeekMessage returns the n-th (1-based) unacknowledged message of the subscription's backlog;
	// ErrMessageNotFound past the end.
	PeekMessage(ctx context.Context, topic, sub string, n int) (adminapi.RawMessage, error)
	// GetMessageByID returns the entry at (ledger, entry); ErrMessageNotFound if absent.
	GetMessageByID(ctx context.Context, topic string, ledgerID, entryID int64) (adminapi.RawMessage, error)
}

// TopicTerminator is optionally implemented by a TopicService: Terminate seals a topic (producers
// refused from then on) and returns its last message id. Without it `POST .../terminate` answers 501.
type TopicTerminator interface {
	Terminate(ctx context.Context, topic string) (adminapi.MessageID, error)
}

// Sentinel errors a TopicService wraps. Each maps to Pulsar's status and reason.
var (
	ErrTopicNotFound        = errors.New("Topic not found")                          // 404
	ErrTopicExists          = errors.New("This topic already exists")                // 409
	ErrTopicBusy            = errors.New("Topic has active producers/subscriptions") // 412
	ErrSubscriptionNotFound = errors.New("Subscription not found")                   // 404
	ErrSubscriptionExists   = errors.New("Subscription already exists for topic")    // 409
	ErrSubscriptionBusy     = errors.New("Subscription has active consumers")        // 412
	ErrMessageNotFound      = errors.New("Message not found")                        // 404
	ErrNotSupported         = errors.New("Operation not supported")                  // 501
	ErrInvalidArgument      = errors.New("Invalid argument")                         // 412
	ErrNotReady             = errors.New("Service not ready")                        // 503
)
