package server

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/auth"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// Authorization of binary commands (docs/security.md, "Authorization"): with
// Options.Authorizer, every command that names a topic or a namespace is checked against the
// connection's role before it is handled; commands that act on a producer or consumer of this
// connection were checked when it was created. A refusal is answered in the command's own
// response with AuthorizationError; the connection lives on.

// commandCheck returns what a command needs and on what; ok is false when the command names no
// valid resource (its handler then answers the malformed name).
type commandCheck func(cmd *pulsarpb.BaseCommand) (need auth.Need, res auth.Resource, ok bool)

// commandChecks maps every command that names a resource to its check.
var commandChecks = map[pulsarpb.BaseCommand_Type]commandCheck{
	pulsarpb.BaseCommand_LOOKUP: func(cmd *pulsarpb.BaseCommand) (auth.Need, auth.Resource, bool) {
		return topicNeed(auth.NeedLookup, cmd.GetLookupTopic().GetTopic(), "")
	},
	pulsarpb.BaseCommand_PARTITIONED_METADATA: func(cmd *pulsarpb.BaseCommand) (auth.Need, auth.Resource, bool) {
		return topicNeed(auth.NeedLookup, cmd.GetPartitionMetadata().GetTopic(), "")
	},
	pulsarpb.BaseCommand_GET_TOPICS_OF_NAMESPACE: func(cmd *pulsarpb.BaseCommand) (auth.Need, auth.Resource, bool) {
		ns, err := naming.ParseNamespace(cmd.GetGetTopicsOfNamespace().GetNamespace())
		if err != nil {
			return 0, auth.Resource{}, false
		}
		return auth.NeedNamespaceAccess, auth.Resource{Tenant: ns.Tenant, Namespace: ns.String()}, true
	},
	pulsarpb.BaseCommand_PRODUCER: func(cmd *pulsarpb.BaseCommand) (auth.Need, auth.Resource, bool) {
		p := cmd.GetProducer()
		if src, isReplicator := replicatorSource(p.GetProducerName()); isReplicator {
			// A replicator's entries carry replicated_from = src: a superuser or src's
			// replicator role only (AdmitReplicator then checks the namespace allows src).
			need, res, ok := topicNeed(auth.NeedReplicator, p.GetTopic(), "")
			res.Cluster = src
			return need, res, ok
		}
		return topicNeed(auth.NeedProduce, p.GetTopic(), "")
	},
	pulsarpb.BaseCommand_SUBSCRIBE: func(cmd *pulsarpb.BaseCommand) (auth.Need, auth.Resource, bool) {
		s := cmd.GetSubscribe()
		return topicNeed(auth.NeedConsume, s.GetTopic(), s.GetSubscription())
	},
	pulsarpb.BaseCommand_GET_SCHEMA: func(cmd *pulsarpb.BaseCommand) (auth.Need, auth.Resource, bool) {
		return topicNeed(auth.NeedLookup, cmd.GetGetSchema().GetTopic(), "")
	},
	pulsarpb.BaseCommand_GET_OR_CREATE_SCHEMA: func(cmd *pulsarpb.BaseCommand) (auth.Need, auth.Resource, bool) {
		return topicNeed(auth.NeedProduce, cmd.GetGetOrCreateSchema().GetTopic(), "")
	},
}

// commandsWithoutCheck are the commands that need no check of their own: they act on a producer
// or consumer this connection created (checked then), belong to the connection itself, or flow
// from broker to client (a client sending one gets "not supported"). Every command type is in
// exactly one of commandChecks and commandsWithoutCheck (TestEveryCommandIsClassified); an
// unclassified one is allowed to superusers only.
var commandsWithoutCheck = map[pulsarpb.BaseCommand_Type]string{
	pulsarpb.BaseCommand_CONNECT:                           "authenticated itself",
	pulsarpb.BaseCommand_PING:                              "connection",
	pulsarpb.BaseCommand_PONG:                              "connection",
	pulsarpb.BaseCommand_AUTH_RESPONSE:                     "authentication",
	pulsarpb.BaseCommand_SEND:                              "producer",
	pulsarpb.BaseCommand_CLOSE_PRODUCER:                    "producer",
	pulsarpb.BaseCommand_FLOW:                              "consumer",
	pulsarpb.BaseCommand_ACK:                               "consumer",
	pulsarpb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES: "consumer",
	pulsarpb.BaseCommand_SEEK:                              "consumer",
	pulsarpb.BaseCommand_GET_LAST_MESSAGE_ID:               "consumer",
	pulsarpb.BaseCommand_UNSUBSCRIBE:                       "consumer",
	pulsarpb.BaseCommand_CLOSE_CONSUMER:                    "consumer",
	pulsarpb.BaseCommand_CONSUMER_STATS:                    "consumer",
}

// topicNeed is a check on a topic named in a command: grants name a partitioned topic, not one of
// its partitions.
func topicNeed(need auth.Need, topic, sub string) (auth.Need, auth.Resource, bool) {
	t, err := naming.ParseTopic(topic)
	if err != nil {
		return 0, auth.Resource{}, false
	}
	return need, auth.Resource{Tenant: t.Tenant, Namespace: t.NamespaceName().String(), Topic: t.Base().String(), Subscription: sub}, true
}

// commandNeed is what cmd needs; ok false when it names no valid resource.
func commandNeed(cmd *pulsarpb.BaseCommand) (auth.Need, auth.Resource, bool) {
	t := cmd.GetType()
	if check, found := commandChecks[t]; found {
		return check(cmd)
	}
	if _, found := commandsWithoutCheck[t]; found {
		return auth.NeedNone, auth.Resource{}, true
	}
	return auth.NeedSuperUser, auth.Resource{}, true
}

// authorized checks f against the connection's role. A refusal is answered (in the command's
// response, AuthorizationError) and logged; the caller then drops the command.
func (c *conn) authorized(f wire.Frame) bool {
	a := c.s.opts.Authorizer
	if a == nil {
		return true
	}
	need, res, ok := commandNeed(f.Cmd)
	if !ok || need == auth.NeedNone {
		return true
	}
	c.authMu.Lock()
	role := c.identity.Role
	c.authMu.Unlock()
	err := a.Authorize(role, need, res)
	if err == nil {
		return true
	}
	c.s.stats.authzFailures.Add(1)
	c.log.Info("command refused: not authorized", "type", f.Type().String(), "role", role, "needs", need.String(), "resource", res.String())
	c.refuseUnauthorized(f.Cmd, err)
	return false
}

// refuseUnauthorized answers cmd with AuthorizationError in the response its client waits for.
func (c *conn) refuseUnauthorized(cmd *pulsarpb.BaseCommand, err error) {
	msg := proto.String(fmt.Sprintf("%v: %v", wire.ErrAuthorization, err))
	code := pulsarpb.ServerError_AuthorizationError.Enum()
	switch cmd.GetType() {
	case pulsarpb.BaseCommand_LOOKUP:
		c.sendCommand(&pulsarpb.CommandLookupTopicResponse{RequestId: proto.Uint64(cmd.GetLookupTopic().GetRequestId()),
			Response: pulsarpb.CommandLookupTopicResponse_Failed.Enum(), Error: code, Message: msg})
	case pulsarpb.BaseCommand_PARTITIONED_METADATA:
		c.sendCommand(&pulsarpb.CommandPartitionedTopicMetadataResponse{RequestId: proto.Uint64(cmd.GetPartitionMetadata().GetRequestId()),
			Response: pulsarpb.CommandPartitionedTopicMetadataResponse_Failed.Enum(), Error: code, Message: msg})
	case pulsarpb.BaseCommand_GET_SCHEMA:
		c.sendCommand(&pulsarpb.CommandGetSchemaResponse{RequestId: proto.Uint64(cmd.GetGetSchema().GetRequestId()), ErrorCode: code, ErrorMessage: msg})
	case pulsarpb.BaseCommand_GET_OR_CREATE_SCHEMA:
		c.sendCommand(&pulsarpb.CommandGetOrCreateSchemaResponse{RequestId: proto.Uint64(cmd.GetGetOrCreateSchema().GetRequestId()), ErrorCode: code, ErrorMessage: msg})
	default:
		reqID, _ := requestIDOf(cmd)
		c.sendCommand(&pulsarpb.CommandError{RequestId: proto.Uint64(reqID), Error: code, Message: msg})
	}
}

// mustCheckOrigin reports whether a producer named name must have its entries checked for
// replicated_from: with authorization on, unless it is a replicator (authorized as one) or its
// connection's role is a superuser.
func (c *conn) mustCheckOrigin(name string) bool {
	a := c.s.opts.Authorizer
	if a == nil {
		return false
	}
	if _, isReplicator := replicatorSource(name); isReplicator {
		return false
	}
	c.authMu.Lock()
	role := c.identity.Role
	c.authMu.Unlock()
	return !a.IsSuperUser(role)
}

// claimsReplication reports whether an entry carries replicated_from: from the scan's origin when
// the scan collected it (scanned), else from the decoded metadata. An entry that does not decode
// is refused later as malformed.
func claimsReplication(entry []byte, origin wire.ReplicatedOrigin, scanned bool) bool {
	if scanned {
		return origin.HasFrom
	}
	md, err := wire.DecodeMetadata(entry)
	return err == nil && md.ReplicatedFrom != nil
}
