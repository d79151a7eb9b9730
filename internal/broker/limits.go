package broker

import (
	"fmt"

	"github.com/meridian-mq/meridian/internal/wire"
)

// The limits on names and properties (wire/limits.go) are checked here too, whoever calls the
// broker core: each of these values is kept for as long as its producer, consumer or subscription
// (and a subscription's properties and a producer's name are persisted), so none may be unbounded.

// limitErr turns a wire limit refusal into the broker's sentinel.
func limitErr(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
}

// checkProducerOptions applies the limits to a producer's name (empty: generated) and properties.
func checkProducerOptions(opts ProducerOptions) error {
	if err := wire.CheckNameLength("producer", opts.Name); err != nil {
		return limitErr(err)
	}
	return limitErr(wire.CheckProperties("producer", opts.Properties))
}

// checkSubscribeOptions applies the limits to a SUBSCRIBE's consumer name (empty: generated) and
// properties, and to the subscription properties (the subscription name: validSubscriptionName).
func checkSubscribeOptions(opts SubscribeOptions) error {
	if err := wire.CheckNameLength("consumer", opts.ConsumerName); err != nil {
		return limitErr(err)
	}
	if err := wire.CheckProperties("consumer", opts.Metadata); err != nil {
		return limitErr(err)
	}
	return limitErr(wire.CheckProperties("subscription", opts.SubscriptionProperties))
}

// validSubscriptionName refuses empty and oversized names, and names reserved for internal cursors.
func (t *topicState) validSubscriptionName(name string) error {
	if err := wire.CheckName("subscription", name); err != nil {
		return limitErr(err)
	}
	if t.b.isInternalCursor(name) {
		return fmt.Errorf("subscription name %q is reserved: %w", name, ErrNotAllowed)
	}
	return nil
}
