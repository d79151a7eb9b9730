package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
	"github.com/meridian-mq/meridian/tests/internal/checker"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

func mustTopicName(t *testing.T, topic string) *utils.TopicName {
	t.Helper()
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		t.Fatalf("topic name %q: %v", topic, err)
	}
	return tn
}

// TestReaders checks readers from earliest, latest, and from a message id inclusive and exclusive,
// on batched and unbatched topics (a batch's message ids carry a batch index).
func TestReaders(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	for _, batching := range []bool{false, true} {
		t.Run(fmt.Sprintf("batching=%v", batching), func(t *testing.T) {
			topic := harness.Topic(t)
			chk := checker.New()
			prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, DisableBatching: !batching, BatchingMaxPublishDelay: 5 * time.Millisecond})
			var ids []pulsar.MessageID
			if batching {
				// Async sends so that batches form; ids come from an earliest reader below.
				sendAsync(t, chk, prod, "p", 0, 20, 64)
			} else {
				ids = sendSync(t, chk, prod, "p", 0, 20, 64)
			}

			earliest := newReader(t, client, pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
			all := readN(t, chk, "earliest", earliest, 20, 30*time.Second)
			verify(t, chk, "earliest", checker.Expect{})
			if batching {
				ids = make([]pulsar.MessageID, len(all))
				for i, m := range all {
					ids[i] = m.ID()
				}
			}

			latest := newReader(t, client, pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.LatestMessageID()})
			if latest.HasNext() {
				t.Fatal("latest reader HasNext on a topic with no new messages")
			}

			from := ids[7]
			excl := newReader(t, client, pulsar.ReaderOptions{Topic: topic, StartMessageID: from})
			m := readN(t, chk, "exclusive", excl, 1, 30*time.Second)
			if k := keyOf(t, m[0]); k.Seq != 8 {
				t.Fatalf("reader from %v (exclusive) started at %s, want p#8", from, k)
			}
			incl := newReader(t, client, pulsar.ReaderOptions{Topic: topic, StartMessageID: from, StartMessageIDInclusive: true})
			m = readN(t, chk, "inclusive", incl, 1, 30*time.Second)
			if k := keyOf(t, m[0]); k.Seq != 7 {
				t.Fatalf("reader from %v (inclusive) started at %s, want p#7", from, k)
			}

			sendSync(t, chk, prod, "p", 20, 21, 64)
			m = readN(t, chk, "latest", latest, 1, 30*time.Second)
			if k := keyOf(t, m[0]); k.Seq != 20 {
				t.Fatalf("latest reader got %s, want p#20", k)
			}
			readN(t, chk, "earliest", earliest, 1, 30*time.Second)
			verify(t, chk, "earliest", checker.Expect{})
		})
	}
}

// TestReaderStartInclusiveLatest checks the corner the client relies on for "read the last message":
// a reader at LatestMessageID with StartMessageIDInclusive gets the last stored message.
func TestReaderStartInclusiveLatest(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	topic := harness.Topic(t)
	chk := checker.New()
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	sendSync(t, chk, prod, "p", 0, 5, 64)
	r := newReader(t, client, pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.LatestMessageID(), StartMessageIDInclusive: true})
	m := readN(t, chk, "r", r, 1, 30*time.Second)
	if k := keyOf(t, m[0]); k.Seq != 4 {
		t.Fatalf("inclusive latest reader got %s, want p#4", k)
	}
}

// TestGetLastMessageID checks GET_LAST_MESSAGE_ID on an empty topic, after unbatched sends and after
// a batch (the id names the last message of the batch).
func TestGetLastMessageID(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	topic := harness.Topic(t)
	chk := checker.New()
	r := newReader(t, client, pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	last, err := r.GetLastMessageID()
	if err != nil {
		t.Fatalf("GetLastMessageID on an empty topic: %v", err)
	}
	if last.EntryID() != -1 {
		t.Fatalf("empty topic: last id %v, want entry id -1", last)
	}
	if r.HasNext() {
		t.Fatal("HasNext on an empty topic")
	}
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	ids := sendSync(t, chk, prod, "p", 0, 3, 64)
	last, err = r.GetLastMessageID()
	if err != nil {
		t.Fatal(err)
	}
	if last.LedgerID() != ids[2].LedgerID() || last.EntryID() != ids[2].EntryID() {
		t.Fatalf("last id %v, want %v", last, ids[2])
	}
	if !r.HasNext() {
		t.Fatal("HasNext false with 3 unread messages")
	}

	batched := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, BatchingMaxPublishDelay: 50 * time.Millisecond, BatchingMaxMessages: 5})
	sendAsync(t, chk, batched, "b", 0, 5, 64)
	all := readN(t, chk, "r", r, 8, 30*time.Second)
	verify(t, chk, "r", checker.Expect{})
	want := all[len(all)-1].ID()
	last, err = r.GetLastMessageID()
	if err != nil {
		t.Fatal(err)
	}
	if last.LedgerID() != want.LedgerID() || last.EntryID() != want.EntryID() || last.BatchIdx() != want.BatchIdx() {
		t.Fatalf("last id after a batch %v, want %v", last, want)
	}
	if r.HasNext() {
		t.Fatal("HasNext true after reading everything")
	}

	cons := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	ids2, err := cons.GetLastMessageIDs()
	if err != nil || len(ids2) != 1 {
		t.Fatalf("consumer GetLastMessageIDs = %v, %v", ids2, err)
	}
	if ids2[0].LedgerID() != want.LedgerID() || ids2[0].EntryID() != want.EntryID() {
		t.Fatalf("consumer last id %v, want %v", ids2[0], want)
	}
}

// TestSeekByID checks Consumer.Seek and Reader.Seek to a message id: delivery restarts at that
// message (a consumer's seek is inclusive), and the client reconnects after the broker closes it.
func TestSeekByID(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	topic := harness.Topic(t)
	chk := checker.New()
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	ids := sendSync(t, chk, prod, "p", 0, 20, 64)

	// The broker redelivers from the sought entry; pulsar-client-go then drops ids up to the sought
	// one unless StartMessageIDInclusive is set (consumer_partition.go messageShouldBeDiscarded), as its
	// own TestConsumerSeek does. Both views are checked.
	cons := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, StartMessageIDInclusive: true})
	receiveN(t, chk, "before", cons, 20, 30*time.Second, false)
	excl := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s-exclusive",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	receiveN(t, chk, "before-exclusive", excl, 20, 30*time.Second, false)
	if err := excl.Seek(ids[5]); err != nil {
		t.Fatalf("Consumer.Seek: %v", err)
	}
	got := receiveN(t, chk, "after-exclusive", excl, 14, 30*time.Second, false)
	if k := keyOf(t, got[0]); k.Seq != 6 {
		t.Fatalf("after Seek(%v) without StartMessageIDInclusive got %s first, want p#6", ids[5], k)
	}
	if err := cons.Seek(ids[5]); err != nil {
		t.Fatalf("Consumer.Seek: %v", err)
	}
	got = receiveN(t, chk, "after", cons, 15, 30*time.Second, false)
	if k := keyOf(t, got[0]); k.Seq != 5 {
		t.Fatalf("after Seek(%v) got %s first, want p#5", ids[5], k)
	}
	verify(t, chk, "after", checker.Expect{Partial: true})

	// (pulsar-client-go refuses Consumer.Seek(EarliestMessageID()): partition index -1.)
	if err := cons.Seek(ids[0]); err != nil {
		t.Fatalf("Seek(first id): %v", err)
	}
	receiveN(t, chk, "again", cons, 20, 30*time.Second, false)
	verify(t, chk, "again", checker.Expect{})

	r := newReader(t, client, pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	readN(t, chk, "reader", r, 20, 30*time.Second)
	if err := r.Seek(ids[10]); err != nil {
		t.Fatalf("Reader.Seek: %v", err)
	}
	ctx := testCtx(t, 30*time.Second)
	m, err := r.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if k := keyOf(t, m); k.Seq != 10 && k.Seq != 11 { // inclusive or not depends on the reader's option
		t.Fatalf("reader after Seek(%v) got %s", ids[10], k)
	}
}

// TestSeekByTime checks Consumer.SeekByTime: delivery restarts at the first message published at or
// after the time.
func TestSeekByTime(t *testing.T) {
	b := startBroker(t, brokerConfig{})
	client := harness.NewClient(t, b, nil)
	topic := harness.Topic(t)
	chk := checker.New()
	prod := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	sendSync(t, chk, prod, "p", 0, 10, 64)
	// Publish times have millisecond resolution: put mid strictly between the two halves. The
	// sleeps are not waits for a condition; they separate timestamps.
	time.Sleep(3 * time.Millisecond)
	mid := time.Now()
	time.Sleep(3 * time.Millisecond)
	sendSync(t, chk, prod, "p", 10, 20, 64)

	cons := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	receiveN(t, chk, "all", cons, 20, 30*time.Second, false)
	if err := cons.SeekByTime(mid); err != nil {
		t.Fatalf("SeekByTime: %v", err)
	}
	got := receiveN(t, chk, "after", cons, 10, 30*time.Second, false)
	if k := keyOf(t, got[0]); k.Seq != 10 {
		t.Fatalf("after SeekByTime got %s first, want p#10", k)
	}
	verify(t, chk, "after", checker.Expect{Partial: true})
	expectNothingBefore(t, client, cons, topic)

	if err := cons.SeekByTime(time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	receiveN(t, chk, "rewind", cons, 20, 30*time.Second, false)
	verify(t, chk, "rewind", checker.Expect{})
}
