package broker

import (
	"errors"
	"fmt"

	"github.com/meridian-mq/meridian/internal/storage"
	"github.com/meridian-mq/meridian/internal/wire"
)

// Sentinel errors. Every error the broker returns wraps one of these (or a storage error, which the
// server reports as PersistenceError). Each is, or wraps, the internal/wire sentinel of the Pulsar
// ServerError code the server sends for it, so wire.ServerErrorOf(err) maps any broker error.
var (
	// ErrTopicNotFound: the topic does not exist and may not be created here. TopicNotFound.
	ErrTopicNotFound = wire.ErrTopicNotFound
	// ErrNamespaceNotFound: the topic's namespace does not exist. TopicNotFound (as Pulsar reports a
	// missing namespace on produce/subscribe).
	ErrNamespaceNotFound = fmt.Errorf("namespace not found: %w", wire.ErrTopicNotFound)
	// ErrProducerBusy: a producer with that name is already connected, or an exclusive producer
	// holds the topic. ProducerBusy.
	ErrProducerBusy = wire.ErrProducerBusy
	// ErrProducerFenced: fenced by a newer exclusive producer or a higher topic epoch. ProducerFenced.
	ErrProducerFenced = wire.ErrProducerFenced
	// ErrConsumerBusy: the subscription is Exclusive and taken, or of another type while it has
	// consumers. ConsumerBusy.
	ErrConsumerBusy = wire.ErrConsumerBusy
	// ErrSubscriptionNotFound: operation on a missing subscription. SubscriptionNotFound.
	ErrSubscriptionNotFound = wire.ErrSubscriptionNotFound
	// ErrConsumerNotFound: the consumer was closed. MetadataError ("Consumer not found"), as Pulsar.
	ErrConsumerNotFound = fmt.Errorf("consumer not found: %w", wire.ErrMetadata)
	// ErrProducerClosed: Publish on a closed producer. ServiceNotReady.
	ErrProducerClosed = fmt.Errorf("producer closed: %w", wire.ErrServiceNotReady)
	// ErrTopicTerminated: the topic is terminated. TopicTerminatedError.
	ErrTopicTerminated = wire.ErrTopicTerminated
	// ErrTopicFenced: the topic is closing, unloading or its storage is fenced. ServiceNotReady (the
	// client retries, as after a Pulsar topic unload).
	ErrTopicFenced = fmt.Errorf("topic fenced: %w", wire.ErrServiceNotReady)
	// ErrNotAllowed: the operation is refused (e.g. a non-forced unsubscribe with other consumers
	// attached, deleting a topic in use). NotAllowedError.
	ErrNotAllowed = wire.ErrNotAllowed
	// ErrDedupUnknown: the sequence id is between the last persisted and the last pushed one of its
	// producer; its fate is not known yet. PersistenceError (the client reconnects and resends, as
	// with Pulsar).
	ErrDedupUnknown = fmt.Errorf("deduplication status unknown: %w", wire.ErrPersistence)
	// ErrInvalidRequest: arguments out of range (lowest sequence id above highest, bad message id).
	// MetadataError.
	ErrInvalidRequest = fmt.Errorf("invalid request: %w", wire.ErrMetadata)
	// ErrPersistence: storage failed. PersistenceError.
	ErrPersistence = wire.ErrPersistence
	// ErrServiceNotReady: the broker is closing or the topic still loading. ServiceNotReady.
	ErrServiceNotReady = wire.ErrServiceNotReady
	// ErrProducerBlockedQuota: a subscription's backlog exceeds the backlog quota (Pulsar's default
	// producer_request_hold policy refuses new producers). ProducerBlockedQuotaExceededError.
	ErrProducerBlockedQuota = wire.ErrProducerBlockedQuotaExceeded
	// ErrProducerBlockedQuotaException: the same under the producer_exception policy.
	// ProducerBlockedQuotaExceededException.
	ErrProducerBlockedQuotaException = wire.ErrProducerBlockedQuotaExceededException
	// ErrConsumerAssign: a Key_Shared sticky consumer's hash ranges are invalid or overlap another
	// consumer's. ConsumerAssignError.
	ErrConsumerAssign = wire.ErrConsumerAssign
	// ErrNotServedHere: another broker of the cluster owns the topic's bundle. ServiceNotReady,
	// which clients answer with a new lookup.
	ErrNotServedHere = fmt.Errorf("not served by this broker, whose cluster gives its bundle to another: %w", wire.ErrServiceNotReady)
	// ErrBrokerClosed: the broker was closed. ServiceNotReady.
	ErrBrokerClosed = fmt.Errorf("broker closed: %w", wire.ErrServiceNotReady)
)

// storageNotReady marks the storage refusals that end by themselves as ServiceNotReady, which
// clients retry: a ledger fenced until its files are rewritten after an I/O error, or storage
// refusing writes while its journal backlog is full. Other errors (corrupt data) stay as they are.
func storageNotReady(err error) error {
	if errors.Is(err, storage.ErrFenced) || errors.Is(err, storage.ErrUnavailable) {
		return fmt.Errorf("%w: %w", ErrTopicFenced, err)
	}
	return err
}
