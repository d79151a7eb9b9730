package harness

import (
	"fmt"
	"os"
	"regexp"
	"strings"
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
// leaked (go.uber.org/goleak with LeakOptions). Goroutines that goleak reports but that run only
// pulsar-client-go code are not counted: the client under v0.19.0 leaves more background loops behind
// after Close than can be listed one by one (partition discovery, nack trackers, reconnect retries),
// and it is not what these tests examine; goroutines of Meridian's own code always count. Use it as
// the whole TestMain:
//
//	func TestMain(m *testing.M) { harness.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	Cleanup()
	if code == 0 {
		if err := goleak.Find(LeakOptions...); err != nil {
			if leaks := ownLeaks(err.Error()); len(leaks) > 0 {
				fmt.Fprintf(os.Stderr, "goleak: goroutines leaked after the tests:\n%s\n", strings.Join(leaks, "\n\n"))
				code = 1
			} else {
				fmt.Fprintf(os.Stderr, "goleak: only pulsar-client-go goroutines left behind (not counted)\n")
			}
		}
	}
	os.Exit(code)
}

// goroutineHeader starts each goroutine in goleak's report.
var goroutineHeader = regexp.MustCompile(`(?m)^\s*\[?Goroutine \d+ in state`)

// ownLeaks splits goleak's report into goroutines and keeps those that are not purely
// pulsar-client-go's: a goroutine with a frame in Meridian's code always counts.
func ownLeaks(report string) []string {
	idx := goroutineHeader.FindAllStringIndex(report, -1)
	var leaks []string
	for i, loc := range idx {
		end := len(report)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		g := report[loc[0]:end]
		if strings.Contains(g, "github.com/apache/pulsar-client-go/") && !strings.Contains(g, "github.com/meridian-mq/meridian/") {
			continue
		}
		leaks = append(leaks, strings.TrimSpace(g))
	}
	if len(idx) == 0 { // unexpected format: count the whole report
		leaks = append(leaks, report)
	}
	return leaks
}
