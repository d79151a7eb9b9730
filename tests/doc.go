// Package tests holds Meridian's end-to-end tests: real Pulsar clients (pulsar-client-go and its
// pulsaradmin package) against in-process and real-process brokers, multi-cluster topologies and
// fault injection. It is a separate module so the broker itself never links the Pulsar client.
package tests
