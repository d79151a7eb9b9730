package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

const (
	userSchemaV1 = `{"type":"record","name":"User","namespace":"test","fields":[{"name":"name","type":"string"}]}`
	userSchemaV2 = `{"type":"record","name":"User","namespace":"test","fields":[{"name":"name","type":"string"},{"name":"age","type":"int","default":0}]}`
	// Incompatible with v1 under FULL: a new field without a default.
	userSchemaBad = `{"type":"record","name":"User","namespace":"test","fields":[{"name":"name","type":"string"},{"name":"email","type":"string"}]}`
)

type userV1 struct {
	Name string `avro:"name" json:"name"`
}

type userV2 struct {
	Name string `avro:"name" json:"name"`
	Age  int    `avro:"age" json:"age"`
}

// TestSchemaAvroProduceConsume: an Avro producer registers version 0, a consumer with the same
// schema decodes the values (GET_SCHEMA for the message's version), a compatible producer adds
// version 1, an incompatible producer and a consumer of another type are refused, and the admin
// API shows the history.
func TestSchemaAvroProduceConsume(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	admin := harness.NewAdmin(t, b)
	topic := harness.Topic(t)
	ctx := testCtx(t, 60*time.Second)

	cons := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s",
		Schema: pulsar.NewAvroSchema(userSchemaV1, nil)})
	p1 := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, Schema: pulsar.NewAvroSchema(userSchemaV1, nil)})
	if _, err := p1.Send(ctx, &pulsar.ProducerMessage{Value: &userV1{Name: "ada"}}); err != nil {
		t.Fatal(err)
	}
	m, err := cons.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got userV1
	if err := m.GetSchemaValue(&got); err != nil || got.Name != "ada" {
		t.Fatalf("GetSchemaValue: %+v %v", got, err)
	}
	if v := m.SchemaVersion(); len(v) != 8 || v[7] != 0 {
		t.Fatalf("schema version %v, want 8-byte 0", v)
	}
	_ = cons.Ack(m)

	p2 := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, Schema: pulsar.NewAvroSchema(userSchemaV2, nil)})
	if _, err := p2.Send(ctx, &pulsar.ProducerMessage{Value: &userV2{Name: "bob", Age: 7}}); err != nil {
		t.Fatal(err)
	}
	m, err = cons.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v := m.SchemaVersion(); len(v) != 8 || v[7] != 1 {
		t.Fatalf("schema version %v, want 8-byte 1", v)
	}
	_ = cons.Ack(m)

	if p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, Schema: pulsar.NewAvroSchema(userSchemaBad, nil)}); err == nil {
		p.Close()
		t.Fatal("incompatible producer schema accepted")
	}
	if c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s2",
		Schema: pulsar.NewStringSchema(nil)}); err == nil {
		c.Close()
		t.Fatal("consumer with a STRING schema accepted on an AVRO topic")
	}

	info, err := admin.Schemas().GetSchemaInfoWithVersion(topic)
	if err != nil {
		t.Fatal(err)
	}
	// The client sends the canonical form of the definition; it has v2's "age" field.
	if info.Version != 1 || info.SchemaInfo.Type != "AVRO" || !strings.Contains(string(info.SchemaInfo.Schema), `"age"`) {
		t.Fatalf("latest schema %+v %+v", info, info.SchemaInfo)
	}
	all, err := admin.Schemas().GetAllSchemas(topic)
	if err != nil || len(all) != 2 {
		t.Fatalf("all schemas: %d %v", len(all), err)
	}
	comp, err := admin.Schemas().TestCompatibilityWithPostSchemaPayload(topic, utils.PostSchemaPayload{SchemaType: "AVRO", Schema: userSchemaBad})
	if err != nil || comp.IsCompatibility {
		t.Fatalf("compatibility of the bad schema: %+v %v", comp, err)
	}
	v0, err := admin.Schemas().GetSchemaInfoByVersion(topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	v, err := admin.Schemas().GetVersionByPayload(topic, utils.PostSchemaPayload{SchemaType: "AVRO", Schema: string(v0.Schema)})
	if err != nil || v != 0 {
		t.Fatalf("version of v1: %d %v", v, err)
	}
	// After a delete, a schema of another type may be registered (a new lineage).
	if err := admin.Schemas().DeleteSchema(topic); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Schemas().GetSchemaInfo(topic); err == nil {
		t.Fatal("schema still there after delete")
	}
	if err := admin.Schemas().CreateSchemaByPayload(topic, utils.PostSchemaPayload{SchemaType: "STRING", Schema: ""}); err != nil {
		t.Fatal(err)
	}
	ps := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, Schema: pulsar.NewStringSchema(nil)})
	if _, err := ps.Send(ctx, &pulsar.ProducerMessage{Value: "hello"}); err != nil {
		t.Fatal(err)
	}
}

// TestSchemaJSONAndBytes: JSON schema producers and consumers round-trip values; a producer without
// a schema (BYTES) may still write to a topic with one, as on Pulsar.
func TestSchemaJSONAndBytes(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	topic := harness.Topic(t)
	ctx := testCtx(t, 60*time.Second)
	js := pulsar.NewJSONSchema(userSchemaV1, nil)
	cons := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Schema: js})
	p := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, Schema: pulsar.NewJSONSchema(userSchemaV1, nil)})
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Value: &userV1{Name: "json"}}); err != nil {
		t.Fatal(err)
	}
	m, err := cons.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got userV1
	if err := m.GetSchemaValue(&got); err != nil || got.Name != "json" {
		t.Fatalf("GetSchemaValue: %+v %v", got, err)
	}
	raw := newProducer(t, client, pulsar.ProducerOptions{Topic: topic})
	if _, err := raw.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(`{"name":"raw"}`)}); err != nil {
		t.Fatalf("BYTES producer on a JSON topic: %v", err)
	}
}

// TestSchemaValidationEnforced: with the namespace policy schemaValidationEnforced, a producer that
// declares no schema is refused on a topic with a schema (and still accepted on one without).
func TestSchemaValidationEnforced(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	admin := harness.NewAdmin(t, b)
	ns := "public/enforced"
	if err := admin.Namespaces().CreateNamespace(ns); err != nil {
		t.Fatal(err)
	}
	nsName, err := utils.GetNamespaceName(ns)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Namespaces().SetSchemaValidationEnforced(*nsName, true); err != nil {
		t.Fatal(err)
	}
	typed := harness.TopicIn(t, ns)
	newProducer(t, client, pulsar.ProducerOptions{Topic: typed, Schema: pulsar.NewStringSchema(nil)})
	harness.Eventually(t, 10*time.Second, "a schema-less producer refused", func() error {
		p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: typed, SendTimeout: time.Second})
		if err == nil {
			p.Close()
			return fmt.Errorf("schema-less producer accepted")
		}
		return nil
	})
	plain := newProducer(t, client, pulsar.ProducerOptions{Topic: harness.TopicIn(t, ns)})
	if _, err := plain.Send(testCtx(t, 20*time.Second), &pulsar.ProducerMessage{Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
}

// TestSchemaOnNonPersistentTopic: schemas work the same on non-persistent topics (the history is
// shared with the persistent topic of the same name, as in Pulsar).
func TestSchemaOnNonPersistentTopic(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	topic := strings.Replace(harness.Topic(t), "persistent://", "non-persistent://", 1)
	ctx := testCtx(t, 30*time.Second)
	cons := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Schema: pulsar.NewStringSchema(nil)})
	p := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, Schema: pulsar.NewStringSchema(nil)})
	// A non-persistent topic drops what a subscription has no permits for, and the client grants
	// its first permits (FLOW) just after SUBSCRIBE returns: send until one arrives.
	var m pulsar.Message
	harness.Eventually(t, 10*time.Second, "the consumer to receive a message", func() error {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Value: "hi"}); err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		var err error
		m, err = cons.Receive(rctx)
		return err
	})
	var s *string // the client's StringSchema decodes into a *string
	if err := m.GetSchemaValue(&s); err != nil || s == nil || *s != "hi" {
		t.Fatalf("GetSchemaValue: %v %v", s, err)
	}
	if c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s2",
		Schema: pulsar.NewAvroSchema(userSchemaV1, nil)}); err == nil {
		c.Close()
		t.Fatal("AVRO consumer accepted on a STRING topic")
	}
}

// TestSchemaSurvivesRestart: schemas live in the broker's metadata store; after a restart the
// history is intact and the same schema keeps its version.
func TestSchemaSurvivesRestart(t *testing.T) {
	b := harness.StartInProcess(t, nil)
	client := harness.NewClient(t, b, nil)
	admin := harness.NewAdmin(t, b)
	topic := harness.Topic(t)
	ctx := testCtx(t, 60*time.Second)
	// The producers are closed before the restart: a producer still reconnecting when the test
	// ends leaves the client's lookup retry running (pulsar-client-go does not cancel it on Close).
	p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, Schema: pulsar.NewAvroSchema(userSchemaV1, nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Value: &userV1{Name: "before"}}); err != nil {
		t.Fatal(err)
	}
	p2, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, Schema: pulsar.NewAvroSchema(userSchemaV2, nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	if _, err := p2.Send(ctx, &pulsar.ProducerMessage{Value: &userV2{Name: "v2", Age: 1}}); err != nil {
		t.Fatal(err)
	}
	p.Close()
	p2.Close()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b.Start()
	all, err := admin.Schemas().GetAllSchemas(topic)
	if err != nil || len(all) != 2 {
		t.Fatalf("after restart: %d versions, %v", len(all), err)
	}
	cons := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, Schema: pulsar.NewAvroSchema(userSchemaV2, nil)})
	m, err := cons.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got userV2
	if err := m.GetSchemaValue(&got); err != nil || got.Name != "before" {
		t.Fatalf("first message after restart: %+v %v", got, err)
	}
	again, err := admin.Schemas().GetVersionByPayload(topic, utils.PostSchemaPayload{SchemaType: "AVRO", Schema: string(all[0].SchemaInfo.Schema)})
	if err != nil || again != 0 {
		t.Fatalf("version of v1 after restart: %d %v", again, err)
	}
}
