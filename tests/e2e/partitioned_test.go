package e2e

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/tests/internal/checker"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// TestPartitionedTopic creates a partitioned topic over the admin API, produces with keys (so each
// key stays on one partition), and checks that one consumer receives everything once and in order per
// key, from every partition, and that a consumer on a single partition sees only that partition.
func TestPartitionedTopic(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	admin := harness.NewAdmin(t, b)
	topic := harness.Topic(t)
	const partitions = 4
	if err := admin.Topics().Create(*mustTopicName(t, topic), partitions); err != nil {
		t.Fatalf("admin create partitioned topic: %v", err)
	}
	md, err := admin.Topics().GetMetadata(*mustTopicName(t, topic))
	if err != nil || md.Partitions != partitions {
		t.Fatalf("partitioned metadata = %+v, %v", md, err)
	}
	parts, err := client.TopicPartitions(topic)
	if err != nil || len(parts) != partitions {
		t.Fatalf("client TopicPartitions = %v, %v", parts, err)
	}
	sort.Strings(parts)
	for i, p := range parts {
		if want := fmt.Sprintf("%s-partition-%d", topic, i); p != want {
			t.Fatalf("partition %d is %q, want %q", i, p, want)
		}
	}

	chk := checker.New()
	cons := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Exclusive})
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, BatchingMaxPublishDelay: 5 * time.Millisecond})
	// One logical producer per key: keys are routed to a fixed partition, so order holds per key.
	const keys, perKey = 8, 25
	ctx := testCtx(t, 60*time.Second)
	done := make(chan error, keys*perKey)
	for seq := int64(0); seq < perKey; seq++ {
		for k := 0; k < keys; k++ {
			name := fmt.Sprintf("key%d", k)
			chk.Sent(name, seq, 64)
			prod.SendAsync(ctx, &pulsar.ProducerMessage{Key: name, Payload: checker.Payload(name, seq, 64)},
				func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					if err != nil {
						chk.Failed(name, seq, err)
					} else {
						chk.Acked(name, seq, id.String())
					}
					done <- err
				})
		}
	}
	for i := 0; i < keys*perKey; i++ {
		if err := <-done; err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	partitionsSeen := map[int32]bool{}
	onPartition1 := map[checker.Key]bool{}
	for _, m := range receiveN(t, chk, "s", cons, keys*perKey, 30*time.Second, false) {
		partitionsSeen[m.ID().PartitionIdx()] = true
		if m.Key() != keyOf(t, m).Producer {
			t.Fatalf("message key %q, payload says %s", m.Key(), keyOf(t, m))
		}
		if m.ID().PartitionIdx() == 1 {
			onPartition1[keyOf(t, m)] = true
		}
	}
	verify(t, chk, "s", checker.Expect{})
	if len(partitionsSeen) < 2 {
		t.Fatalf("8 keys landed on %d partition(s): %v", len(partitionsSeen), partitionsSeen)
	}

	// A reader on one partition sees exactly the messages the consumer got from that partition.
	r := newReader(t, client, pulsar.ReaderOptions{Topic: parts[1], StartMessageID: pulsar.EarliestMessageID()})
	ctx2 := testCtx(t, 10*time.Second)
	read := 0
	for r.HasNext() {
		m, err := r.Next(ctx2)
		if err != nil {
			t.Fatal(err)
		}
		if k := keyOf(t, m); !onPartition1[k] {
			t.Fatalf("reader on %s got %s, which the consumer did not get from partition 1", parts[1], k)
		}
		read++
	}
	if read != len(onPartition1) {
		t.Fatalf("reader on %s read %d messages, the consumer got %d from partition 1", parts[1], read, len(onPartition1))
	}

	// Updating the partition count is visible to the admin API.
	if err := admin.Topics().Update(*mustTopicName(t, topic), partitions+2); err != nil {
		t.Fatalf("admin update partitions: %v", err)
	}
	md, err = admin.Topics().GetMetadata(*mustTopicName(t, topic))
	if err != nil || md.Partitions != partitions+2 {
		t.Fatalf("after update: metadata = %+v, %v", md, err)
	}
}

// TestPartitionedTopicShortName checks that short topic names ("name" for
// persistent://public/default/name) work for partitioned topics and their partitions.
func TestPartitionedTopicShortName(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	admin := harness.NewAdmin(t, b)
	full := harness.Topic(t)
	short := full[len("persistent://public/default/"):]
	if err := admin.Topics().Create(*mustTopicName(t, full), 2); err != nil {
		t.Fatal(err)
	}
	chk := checker.New()
	cons := newConsumer(t, client, pulsar.ConsumerOptions{Topic: short, SubscriptionName: "s"})
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: short + "-partition-1", DisableBatching: true})
	sendSync(t, chk, prod, "p", 0, 10, 64)
	receiveN(t, chk, "s", cons, 10, 30*time.Second, false)
	verify(t, chk, "s", checker.Expect{})
}
