package server

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/auth"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

type staticPolicies map[string]auth.NamespacePermissions

func (staticPolicies) TenantAdminRoles(tenant string) ([]string, bool) {
	return []string{"tenant-admin"}, tenant == "public"
}
func (staticPolicies) ReplicatorRoles(cluster string) []string {
	if cluster == "west" {
		return []string{"west-link"}
	}
	return nil
}

func (staticPolicies) IsReplicatorRole(role string) bool { return role == "west-link" }

func (s staticPolicies) NamespacePermissions(ns string) (auth.NamespacePermissions, bool) {
	p, ok := s[ns]
	return p, ok
}

// TestCommandAuthorization: every command naming a topic or namespace is checked against the
// connection's role, refused in its own response with AuthorizationError, and the connection
// lives on.
func TestCommandAuthorization(t *testing.T) {
	const topic = "persistent://public/default/orders"
	authz := auth.NewAuthorizer([]string{"root"}, staticPolicies{"public/default": {
		Roles:         map[string][]string{"writer": {"produce"}},
		Topics:        map[string]map[string][]string{topic: {"reader": {"consume"}}},
		Subscriptions: map[string][]string{"locked": {"someone-else"}},
	}})
	s := startServer(t, Options{Authenticator: tokenAuthenticator(t, ""), Authorizer: authz})
	as := func(role string) *rawClient {
		c := dialRaw(t, s.addr)
		connectWith(c, "token", []byte(testToken(t, testSecret, jwt.MapClaims{"sub": role})))
		c.expect(pulsarpb.BaseCommand_CONNECTED)
		return c
	}
	refused := func(c *rawClient, what string) {
		t.Helper()
		e := c.expect(pulsarpb.BaseCommand_ERROR).Cmd.GetError()
		if e.GetError() != pulsarpb.ServerError_AuthorizationError {
			t.Fatalf("%s: %v %q, want AuthorizationError", what, e.GetError(), e.GetMessage())
		}
	}
	lookup := func(c *rawClient, topic string) *pulsarpb.CommandLookupTopicResponse {
		c.send(&pulsarpb.CommandLookupTopic{Topic: proto.String(topic), RequestId: proto.Uint64(1)})
		return c.expect(pulsarpb.BaseCommand_LOOKUP_RESPONSE).Cmd.GetLookupTopicResponse()
	}
	producer := func(c *rawClient, topic string) {
		c.send(&pulsarpb.CommandProducer{Topic: proto.String(topic), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(2)})
	}
	subscribe := func(c *rawClient, topic, sub string, id uint64) {
		c.send(&pulsarpb.CommandSubscribe{Topic: proto.String(topic), Subscription: proto.String(sub), SubType: pulsarpb.CommandSubscribe_Shared.Enum(),
			ConsumerId: proto.Uint64(id), RequestId: proto.Uint64(10 + id)})
	}
	topicsOf := func(c *rawClient) {
		c.send(&pulsarpb.CommandGetTopicsOfNamespace{Namespace: proto.String("public/default"), RequestId: proto.Uint64(3)})
	}

	w := as("writer")
	if r := lookup(w, topic); r.GetResponse() != pulsarpb.CommandLookupTopicResponse_Connect {
		t.Fatalf("writer's lookup: %v", r)
	}
	producer(w, topic)
	w.expect(pulsarpb.BaseCommand_PRODUCER_SUCCESS)
	subscribe(w, topic, "s", 1)
	refused(w, "writer's SUBSCRIBE")
	topicsOf(w)
	w.expect(pulsarpb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE)

	r := as("reader")
	producer(r, topic)
	refused(r, "reader's PRODUCER")
	subscribe(r, topic, "s", 1)
	r.expect(pulsarpb.BaseCommand_SUCCESS)
	subscribe(r, topic, "locked", 2)
	refused(r, "reader's SUBSCRIBE to a subscription of other roles")
	topicsOf(r)
	refused(r, "reader's GET_TOPICS_OF_NAMESPACE (a topic grant only)")
	r.send(&pulsarpb.CommandPartitionedTopicMetadata{Topic: proto.String(topic), RequestId: proto.Uint64(4)})
	if pm := r.expect(pulsarpb.BaseCommand_PARTITIONED_METADATA_RESPONSE).Cmd.GetPartitionMetadataResponse(); pm.GetResponse() != pulsarpb.CommandPartitionedTopicMetadataResponse_Success {
		t.Fatalf("reader's partitioned metadata: %v", pm)
	}
	if l := lookup(r, "persistent://public/default/elsewhere"); l.GetResponse() != pulsarpb.CommandLookupTopicResponse_Failed || l.GetError() != pulsarpb.ServerError_AuthorizationError {
		t.Fatalf("reader's lookup of another topic: %v", l)
	}
	r.send(&pulsarpb.CommandPartitionedTopicMetadata{Topic: proto.String("persistent://public/default/elsewhere"), RequestId: proto.Uint64(5)})
	if pm := r.expect(pulsarpb.BaseCommand_PARTITIONED_METADATA_RESPONSE).Cmd.GetPartitionMetadataResponse(); pm.GetError() != pulsarpb.ServerError_AuthorizationError {
		t.Fatalf("reader's partitioned metadata of another topic: %v", pm)
	}
	r.send(&pulsarpb.CommandGetSchema{Topic: proto.String("persistent://public/default/elsewhere"), RequestId: proto.Uint64(6)})
	if gs := r.expect(pulsarpb.BaseCommand_GET_SCHEMA_RESPONSE).Cmd.GetGetSchemaResponse(); gs.GetErrorCode() != pulsarpb.ServerError_AuthorizationError {
		t.Fatalf("reader's GET_SCHEMA of another topic: %v", gs)
	}
	// The connection lives on after refusals.
	r.send(&pulsarpb.CommandPing{})
	r.expect(pulsarpb.BaseCommand_PONG)

	for _, role := range []string{"root", "tenant-admin"} {
		c := as(role)
		producer(c, "persistent://public/default/anything")
		c.expect(pulsarpb.BaseCommand_PRODUCER_SUCCESS)
		subscribe(c, topic, "locked", 1)
		c.expect(pulsarpb.BaseCommand_SUCCESS)
	}
	stranger := as("stranger")
	if l := lookup(stranger, topic); l.GetError() != pulsarpb.ServerError_AuthorizationError {
		t.Fatalf("stranger's lookup: %v", l)
	}
	if got := s.Stats().AuthorizationFailures; got != 8 {
		t.Errorf("AuthorizationFailures = %d, want 8", got)
	}
}

// TestEveryCommandIsClassified: every command the dispatcher handles is either checked
// (commandChecks) or listed as needing no check of its own (commandsWithoutCheck).
func TestEveryCommandIsClassified(t *testing.T) {
	src, err := os.ReadFile("connect.go")
	if err != nil {
		t.Fatal(err)
	}
	body := string(src)
	body = body[strings.Index(body, "func (c *conn) handle("):]
	body = body[:strings.Index(body, "\n}\n")]
	cases := regexp.MustCompile(`case pulsarpb\.BaseCommand_(\w+):`).FindAllStringSubmatch(body, -1)
	if len(cases) < 15 {
		t.Fatalf("found only %d commands in handle", len(cases))
	}
	for _, m := range cases {
		typ := pulsarpb.BaseCommand_Type(pulsarpb.BaseCommand_Type_value[m[1]])
		_, checked := commandChecks[typ]
		_, unchecked := commandsWithoutCheck[typ]
		if checked == unchecked {
			t.Errorf("command %s: add it to commandChecks (it names a topic or namespace) or to commandsWithoutCheck in internal/server/authz.go", m[1])
		}
	}
}

// TestReplicatorAuthorization: a producer named as a replicator of cluster west is created only
// for a superuser or west's replicator role, whatever produce grants the role has; an ordinary
// producer's SEND that carries replicated_from is refused (AuthorizationError) and not stored,
// while a superuser's is served.
func TestReplicatorAuthorization(t *testing.T) {
	const topic = "persistent://public/default/replicated"
	authz := auth.NewAuthorizer([]string{"root"}, staticPolicies{"public/default": {
		Roles: map[string][]string{"writer": {"produce"}, "west-link": {"produce"}},
	}})
	s := startServer(t, Options{Authenticator: tokenAuthenticator(t, ""), Authorizer: authz})
	as := func(role string) *rawClient {
		c := dialRaw(t, s.addr)
		connectWith(c, "token", []byte(testToken(t, testSecret, jwt.MapClaims{"sub": role})))
		c.expect(pulsarpb.BaseCommand_CONNECTED)
		return c
	}
	replicator := func(c *rawClient, id uint64, suffix string) {
		c.send(&pulsarpb.CommandProducer{Topic: proto.String(topic), ProducerId: proto.Uint64(id), RequestId: proto.Uint64(id),
			ProducerName: proto.String("pulsar.repl.west-->east" + suffix)})
	}
	w := as("writer")
	replicator(w, 1, "")
	if e := w.expect(pulsarpb.BaseCommand_ERROR).Cmd.GetError(); e.GetError() != pulsarpb.ServerError_AuthorizationError {
		t.Fatalf("writer as west's replicator: %v", e)
	}
	for _, role := range []string{"west-link", "root"} {
		c := as(role)
		replicator(c, 1, role)
		c.expect(pulsarpb.BaseCommand_PRODUCER_SUCCESS)
	}

	forged := func(t *testing.T) []byte {
		e, err := wire.EncodeEntry(&pulsarpb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(0),
			PublishTime: proto.Uint64(1), ReplicatedFrom: proto.String("west")}, []byte("forged"))
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	w.createProducer(topic, 2, 2)
	w.sendMessage(2, 0, forged(t))
	se := w.expect(pulsarpb.BaseCommand_SEND_ERROR).Cmd.GetSendError()
	if se.GetError() != pulsarpb.ServerError_AuthorizationError {
		t.Fatalf("forged replicated_from: %v", se)
	}
	w.sendMessage(2, 1, entry(t, "p", 1, []byte("plain")))
	w.expect(pulsarpb.BaseCommand_SEND_RECEIPT)

	root := as("root")
	root.createProducer(topic, 3, 3)
	root.sendMessage(3, 0, forged(t))
	root.expect(pulsarpb.BaseCommand_SEND_RECEIPT)
}
