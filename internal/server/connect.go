package server

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// minProtocolVersion is the oldest protocol revision served. v6 introduced the checksum magic
// that stored entries carry; clients older than that are a decade old.
const minProtocolVersion = int32(pulsarpb.ProtocolVersion_v6)

// handle dispatches one frame. A returned error closes the connection.
func (c *conn) handle(f wire.Frame) error {
	t := f.Type()
	if !c.connected {
		if t != pulsarpb.BaseCommand_CONNECT {
			return c.badFrame(fmt.Errorf("%s before CONNECT", t))
		}
		return c.handleConnect(f.Cmd.GetConnect())
	}
	if t != pulsarpb.BaseCommand_SEND {
		c.flushSends() // every other command comes after the SENDs read before it
	}
	if f.Payload != nil && t != pulsarpb.BaseCommand_SEND {
		return c.badFrame(fmt.Errorf("%s frame with a %d-byte payload", t, len(f.Payload)))
	}
	if !c.authorized(f) {
		return nil
	}
	cmd := f.Cmd
	switch t {
	case pulsarpb.BaseCommand_PING:
		c.sendCommand(&pulsarpb.CommandPong{})
	case pulsarpb.BaseCommand_PONG:
		// lastRead is already refreshed
	case pulsarpb.BaseCommand_CONNECT:
		return c.badFrame(errors.New("second CONNECT on one connection"))

	case pulsarpb.BaseCommand_LOOKUP:
		c.handleLookup(cmd.GetLookupTopic())
	case pulsarpb.BaseCommand_PARTITIONED_METADATA:
		c.handlePartitionedMetadata(cmd.GetPartitionMetadata())
	case pulsarpb.BaseCommand_GET_TOPICS_OF_NAMESPACE:
		c.handleGetTopicsOfNamespace(cmd.GetGetTopicsOfNamespace())

	case pulsarpb.BaseCommand_PRODUCER:
		c.handleProducer(cmd.GetProducer())
	case pulsarpb.BaseCommand_SEND:
		return c.handleSend(cmd.GetSend(), f.Payload)
	case pulsarpb.BaseCommand_CLOSE_PRODUCER:
		c.handleCloseProducer(cmd.GetCloseProducer())

	case pulsarpb.BaseCommand_SUBSCRIBE:
		c.handleSubscribe(cmd.GetSubscribe())
	case pulsarpb.BaseCommand_FLOW:
		c.handleFlow(cmd.GetFlow())
	case pulsarpb.BaseCommand_ACK:
		c.handleAck(cmd.GetAck())
	case pulsarpb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES:
		c.handleRedeliver(cmd.GetRedeliverUnacknowledgedMessages())
	case pulsarpb.BaseCommand_SEEK:
		c.handleSeek(cmd.GetSeek())
	case pulsarpb.BaseCommand_GET_LAST_MESSAGE_ID:
		c.handleGetLastMessageID(cmd.GetGetLastMessageId())
	case pulsarpb.BaseCommand_UNSUBSCRIBE:
		c.handleUnsubscribe(cmd.GetUnsubscribe())
	case pulsarpb.BaseCommand_CLOSE_CONSUMER:
		c.handleCloseConsumer(cmd.GetCloseConsumer())
	case pulsarpb.BaseCommand_CONSUMER_STATS:
		c.handleConsumerStats(cmd.GetConsumerStats())

	case pulsarpb.BaseCommand_AUTH_RESPONSE:
		if c.s.opts.Authenticator == nil {
			c.answerUnknown(f, errors.New("AUTH_RESPONSE without authentication"))
			return nil
		}
		return c.handleAuthResponse(cmd.GetAuthResponse())

	case pulsarpb.BaseCommand_GET_SCHEMA:
		c.handleGetSchema(cmd.GetGetSchema())
	case pulsarpb.BaseCommand_GET_OR_CREATE_SCHEMA:
		c.handleGetOrCreateSchema(cmd.GetGetOrCreateSchema())
	default:
		// Known to the protocol but not served here (transactions, topic watchers,
		// broker-to-client commands sent by a confused peer): ERROR, connection lives on.
		c.answerUnknown(f, fmt.Errorf("%s is not supported", t))
	}
	return nil
}

// handleConnect answers CONNECT with CONNECTED. The client reads only max_message_size from it; we
// also send server_version and protocol_version = min(client's, ours), as Pulsar does.
func (c *conn) handleConnect(cmd *pulsarpb.CommandConnect) error {
	version := cmd.GetProtocolVersion()
	if version < minProtocolVersion {
		c.sendCommand(&pulsarpb.CommandError{
			RequestId: proto.Uint64(0),
			Error:     pulsarpb.ServerError_UnsupportedVersionError.Enum(),
			Message:   proto.String(fmt.Sprintf("protocol version %d is older than v%d, the oldest this broker serves", version, minProtocolVersion)),
		})
		return c.badFrame(fmt.Errorf("protocol version %d unsupported", version))
	}
	if err := c.authenticate(cmd); err != nil {
		return err
	}
	if cmd.GetProxyToBrokerUrl() != "" {
		c.log.Info("client connects through a proxy", "proxyToBrokerUrl", cmd.GetProxyToBrokerUrl())
	}
	c.protocolVersion = min(version, wire.ProtocolVersion)
	c.clientVersion = cmd.GetClientVersion()
	c.connected = true
	// Authenticated (or authentication is off): frames up to the max message size from now on.
	c.reader.SetMaxFrameSize(wire.MaxFrameSize(c.s.opts.MaxMessageSize))
	if !c.stopping() {
		_ = c.nc.SetReadDeadline(time.Time{})
	}
	// c.log stays as built in newConn: other goroutines read it concurrently.
	c.sendCommand(&pulsarpb.CommandConnected{
		ServerVersion:   proto.String(ServerVersion),
		ProtocolVersion: proto.Int32(c.protocolVersion),
		MaxMessageSize:  proto.Int32(int32(c.s.opts.MaxMessageSize)),
		FeatureFlags:    &pulsarpb.FeatureFlags{SupportsAuthRefresh: proto.Bool(c.s.opts.Authenticator != nil)},
	})
	c.log.Debug("client connected", "client", c.clientVersion, "protocolVersion", version)
	return nil
}
