package server

import (
	"errors"

	"github.com/meridian-mq/meridian/internal/broker"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// brokerToWire names, for each sentinel of the broker core (which cannot import wire), the wire
// sentinel whose ServerError code the client must see. The codes themselves live only in wire's
// table; this is the translation between the two packages' vocabularies, checked by a test that
// every broker sentinel appears here.
var brokerToWire = []struct{ broker, wire error }{
	{broker.ErrTopicNotFound, wire.ErrTopicNotFound},
	{broker.ErrNamespaceNotFound, wire.ErrTopicNotFound},
	{broker.ErrProducerBusy, wire.ErrProducerBusy},
	{broker.ErrProducerFenced, wire.ErrProducerFenced},
	{broker.ErrConsumerBusy, wire.ErrConsumerBusy},
	{broker.ErrSubscriptionNotFound, wire.ErrSubscriptionNotFound},
	{broker.ErrConsumerNotFound, wire.ErrMetadata}, // Pulsar: MetadataError "Consumer not found"
	{broker.ErrProducerClosed, wire.ErrServiceNotReady},
	{broker.ErrTopicTerminated, wire.ErrTopicTerminated},
	{broker.ErrTopicFenced, wire.ErrServiceNotReady},
	{broker.ErrNotAllowed, wire.ErrNotAllowed},
	{broker.ErrDedupUnknown, wire.ErrPersistence},
	{broker.ErrInvalidRequest, wire.ErrMetadata},
	{broker.ErrPersistence, wire.ErrPersistence},
	{broker.ErrServiceNotReady, wire.ErrServiceNotReady},
	{broker.ErrBrokerClosed, wire.ErrServiceNotReady},
	{naming.ErrInvalidName, wire.ErrInvalidTopicName},
}

// toServerError maps any error the server meets to the ServerError code the client gets and the
// message that goes with it. Unknown errors (storage failures and the like) are PersistenceError
// when they come from the broker's storage path, else UnknownError.
func toServerError(err error) (pulsarpb.ServerError, string) {
	if err == nil {
		return pulsarpb.ServerError_UnknownError, ""
	}
	for _, row := range brokerToWire {
		if errors.Is(err, row.broker) {
			return wire.ServerErrorOf(row.wire), err.Error()
		}
	}
	return wire.ServerErrorOf(err), err.Error()
}
