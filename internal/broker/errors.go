package broker

import "errors"

// Sentinel errors. Every error the broker returns wraps one of these (or a storage error, which the
// server should report as PersistenceError). The comment names the Pulsar ServerError code the
// server sends for it.
var (
	// ErrTopicNotFound: the topic does not exist and may not be created here. ServerError TopicNotFound.
	ErrTopicNotFound = errors.New("topic not found")
	// ErrNamespaceNotFound: the topic's namespace does not exist. ServerError TopicNotFound (as Pulsar,
	// which reports a missing namespace on lookup/produce as a missing topic).
	ErrNamespaceNotFound = errors.New("namespace not found")
	// ErrProducerBusy: a producer with that name is already connected, or an exclusive producer holds
	// the topic. ServerError ProducerBusy.
	ErrProducerBusy = errors.New("producer busy")
	// ErrProducerFenced: the producer was fenced by a newer exclusive producer or a higher topic
	// epoch. ServerError ProducerFenced.
	ErrProducerFenced = errors.New("producer fenced")
	// ErrConsumerBusy: the subscription is Exclusive and taken, or of another type while it has
	// consumers. ServerError ConsumerBusy.
	ErrConsumerBusy = errors.New("consumer busy")
	// ErrSubscriptionNotFound: admin operation on a missing subscription. ServerError SubscriptionNotFound.
	ErrSubscriptionNotFound = errors.New("subscription not found")
	// ErrConsumerNotFound: the consumer was closed. ServerError MetadataError with "Consumer not found".
	ErrConsumerNotFound = errors.New("consumer not found")
	// ErrProducerClosed: Publish on a closed producer. The server closes the connection's producer.
	ErrProducerClosed = errors.New("producer closed")
	// ErrTopicTerminated: the topic is terminated. ServerError TopicTerminatedError.
	ErrTopicTerminated = errors.New("topic terminated")
	// ErrTopicFenced: the topic is closing, unloading or its storage is fenced. ServerError
	// ServiceNotReady (the client retries, as after a Pulsar topic unload).
	ErrTopicFenced = errors.New("topic fenced")
	// ErrNotAllowed: the operation is refused (e.g. a non-forced unsubscribe with other consumers
	// attached, deleting a topic in use). ServerError NotAllowedError.
	ErrNotAllowed = errors.New("not allowed")
	// ErrDedupUnknown: the sequence id is between the last persisted and the last pushed one of its
	// producer; its fate is not known yet. ServerError PersistenceError (the client reconnects and
	// resends, as with Pulsar).
	ErrDedupUnknown = errors.New("deduplication status unknown")
	// ErrInvalidRequest: arguments out of range (lowest sequence id above highest, bad message id).
	// ServerError MetadataError.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrPersistence: storage failed. ServerError PersistenceError.
	ErrPersistence = errors.New("persistence error")
	// ErrServiceNotReady: the broker is closing or the topic still loading. ServerError ServiceNotReady.
	ErrServiceNotReady = errors.New("service not ready")
	// ErrBrokerClosed: the broker was closed. ServerError ServiceNotReady.
	ErrBrokerClosed = errors.New("broker closed")
)
