package harness

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// LeakOptions are the goroutines goleak ignores in every e2e package: long-lived background
// goroutines of libraries that a test cannot stop (none of them belongs to a broker or a client
// the test created and closed).
var LeakOptions = []goleak.Option{
	// net/http's keep-alive connections of http.DefaultClient (readiness polls, pulsaradmin).
	goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
	goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	// etcd's and grpc's process-wide background goroutines.
	goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
	goleak.IgnoreAnyFunction("go.etcd.io/etcd/pkg/v3/traceutil.(*Trace).LogIfLong"),
	// pulsar-client-go v0.19.0: a producer's send-timeout loop notices Close only at its next timer
	// tick (up to SendTimeout later); it then exits.
	goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionProducer).failTimeoutMessages"),
	// pulsar-client-go v0.19.0: after Unsubscribe a consumer is marked closed, so Close returns early
	// and its dispatcher, events loop and ack-grouping ticker never stop (internalUnsubscribe).
	goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionConsumer).dispatcher"),
	goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionConsumer).runEventsLoop"),
	goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.newAckGroupingTracker.func1"),
	// pulsar-client-go v0.19.0: a producer's or consumer's reconnect loop (lookup with retries) that
	// was running when its client closed ends only when its current retry gives up.
	goleak.IgnoreAnyFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionProducer).reconnectToBroker"),
	goleak.IgnoreAnyFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionConsumer).reconnectToBroker"),
	// pulsar-client-go v0.19.0: one timer goroutine per chunked message lives for
	// ExpireTimeOfIncompleteChunk (60 s) even after the message completed.
	goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*chunkedMsgCtxMap).discardChunkIfExpire"),
}

// Main runs the package's tests, removes what the harness built, and fails the run if goroutines
// leaked (go.uber.org/goleak). Use it as the whole TestMain:
//
//	func TestMain(m *testing.M) { harness.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	Cleanup()
	if code == 0 {
		if err := goleak.Find(LeakOptions...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines leaked after the tests:\n%v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
