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
