package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/meridian-mq/meridian/tests/internal/checker"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// Issue 6, "Faults, on real meridian standalone processes": two independent clusters (each with its
// own metadata, configured through its own admin API) replicate one way, east -> west, while one of
// them is killed with SIGKILL in the middle and restarted on the same ports and data dir. The
// producer (a separate process, see cmd/e2e-producer) uses deduplication; every message it was told
// is stored must reach west exactly once, in order, marked as replicated from east.

// replicationPair is two independent standalone clusters with public/default replicating east -> west.
type replicationPair struct {
	east, west *harness.Process
}

func startReplicationPair(t *testing.T) replicationPair {
	t.Helper()
	east := harness.StartStandalone(t, harness.Options{Cluster: "east", Dedup: true})
	west := harness.StartStandalone(t, harness.Options{Cluster: "west", Dedup: true})
	eastAdmin, westAdmin := harness.NewAdmin(t, east), harness.NewAdmin(t, west)
	// Each cluster registers the other (independent stores: nothing is shared).
	if err := eastAdmin.Clusters().Create(utils.ClusterData{Name: "west", ServiceURL: west.WebURL(), BrokerServiceURL: west.ServiceURL()}); err != nil {
		t.Fatalf("register west in east: %v", err)
	}
	if err := westAdmin.Clusters().Create(utils.ClusterData{Name: "east", ServiceURL: east.WebURL(), BrokerServiceURL: east.ServiceURL()}); err != nil {
		t.Fatalf("register east in west: %v", err)
	}
	for _, c := range []struct {
		name string
		upd  func(utils.TenantData) error
	}{{"east", eastAdmin.Tenants().Update}, {"west", westAdmin.Tenants().Update}} {
		if err := c.upd(utils.TenantData{Name: "public", AllowedClusters: []string{"east", "west"}}); err != nil {
			t.Fatalf("tenant public allowedClusters on %s: %v", c.name, err)
		}
	}
	if err := eastAdmin.Namespaces().SetNamespaceReplicationClusters("public/default", []string{"east", "west"}); err != nil {
		t.Fatalf("public/default replication clusters on east: %v", err)
	}
	return replicationPair{east: east, west: west}
}

// replicationBacklog returns east's replication backlog towards west for topic and whether the
// replicator is connected.
func replicationBacklog(t *testing.T, p *harness.Process, topic, remote string) (int64, bool, error) {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		t.Fatalf("topic name %s: %v", topic, err)
	}
	st, err := harness.NewAdmin(t, p).Topics().GetStats(*tn)
	if err != nil {
		return 0, false, err
	}
	r, ok := st.Replication[remote]
	if !ok {
		return 0, false, fmt.Errorf("no replication.%s in the stats of %s (have %v)", remote, topic, st.Replication)
	}
	return r.ReplicationBacklog, r.Connected, nil
}

func TestReplicationSurvivesTargetKill(t *testing.T) {
	runReplicationKill(t, "west")
}

func TestReplicationSurvivesSourceKill(t *testing.T) {
	runReplicationKill(t, "east")
}

// runReplicationKill produces on east through a separate producer process, SIGKILLs victim (east or
// west) once half of the messages are acknowledged, restarts it, and then proves that west stores
// every acknowledged message exactly once, in order, replicated from east.
func runReplicationKill(t *testing.T, victim string) {
	total := 50000
	if testing.Short() {
		total = 5000
	}
	pair := startReplicationPair(t)
	killed := pair.west
	if victim == "east" {
		killed = pair.east
	}
	runCtx, cancelRun := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancelRun()
	// Waits end early if a broker crashes on its own.
	runCtx, cancelEast := pair.east.CrashContext(runCtx)
	defer cancelEast()
	runCtx, cancelWest := pair.west.CrashContext(runCtx)
	defer cancelWest()

	topic := harness.Topic(t)
	chk := checker.New()
	const name = "repl-producer"
	const size = 256
	for seq := int64(0); seq < int64(total); seq++ {
		chk.Sent(name, seq, size)
	}
	var acked atomic.Int64
	// The test sees receipts a little late (they come through the producer process's stdout pipe,
	// at most MaxPendingMessages plus a pipe buffer behind), so the kill point leaves a wide margin.
	killAt := int64(total * 2 / 5)
	type killResult struct {
		ackedAtKill int64
		downFor     time.Duration
		err         error
	}
	killDone := make(chan killResult, 1)
	go func() {
		for acked.Load() < killAt {
			select {
			case <-runCtx.Done():
				killDone <- killResult{err: fmt.Errorf("acked stuck at %d < %d: %v", acked.Load(), killAt, context.Cause(runCtx))}
				return
			case <-time.After(5 * time.Millisecond): // poll interval of a deadline-bounded wait
			}
		}
		at := acked.Load()
		start := time.Now()
		err := killed.RestartE() // SIGKILL, start on the same ports and data dir, wait for ready
		killDone <- killResult{ackedAtKill: at, downFor: time.Since(start), err: err}
	}()
	produceStart := time.Now()
	failed, firstErr := runProducerProcess(t, runCtx, chk, producerRun{
		url: pair.east.ServiceURL(), topic: topic, name: name, from: 0, n: int64(total), size: size,
	}, func() { acked.Add(1) })
	produced := time.Since(produceStart)
	kr := <-killDone
	if kr.err != nil {
		t.Fatalf("killing %s: %v", victim, kr.err)
	}
	ackedN, failedN, pendingN := chk.Counts()
	t.Logf("SIGKILL of %s with %d of %d acked (down and back ready in %v); producer done in %v: acked %d, failed %d, pending %d (first error: %v)",
		victim, kr.ackedAtKill, total, kr.downFor.Round(time.Millisecond), produced.Round(time.Millisecond), ackedN, failedN, pendingN, firstErr)
	if failed > 0 {
		t.Errorf("%d sends failed, first: %v", failed, firstErr)
	}

	// West catches up: a reader from the earliest position receives every acked message.
	westClient := harness.NewClient(t, pair.west, func(o *pulsar.ClientOptions) { o.OperationTimeout = 30 * time.Second })
	catchUpStart := time.Now()
	catchCtx, cancelCatch := context.WithTimeout(runCtx, 90*time.Second)
	defer cancelCatch()
	if err := harness.WaitFor(catchCtx, func(ctx context.Context) error {
		backlog, connected, err := replicationBacklog(t, pair.east, topic, "west")
		if err != nil {
			return err
		}
		if backlog != 0 || !connected {
			return fmt.Errorf("east -> west backlog %d, connected %v", backlog, connected)
		}
		return nil
	}); err != nil {
		t.Fatalf("replication east -> west did not catch up: %v (%v)", err, context.Cause(catchCtx))
	}
	caughtUp := time.Since(catchUpStart)

	r := newReader(t, westClient, pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	wrongOrigin := 0
	var firstWrong string
	for r.HasNext() {
		m, err := r.Next(catchCtx)
		if err != nil {
			t.Fatalf("reader on west: %v (%v)", err, context.Cause(catchCtx))
		}
		chk.Received("west", m.Payload(), m.ID().String())
		if !m.IsReplicated() || m.GetReplicatedFrom() != "east" {
			if wrongOrigin == 0 {
				firstWrong = fmt.Sprintf("%v: replicated=%v from %q", m.ID(), m.IsReplicated(), m.GetReplicatedFrom())
			}
			wrongOrigin++
		}
	}
	t.Logf("west caught up %v after the producer finished (backlog 0 and connected); %d messages stored on west", caughtUp.Round(time.Millisecond), chk.ReceivedCount("west"))
	if wrongOrigin > 0 {
		t.Errorf("%d messages on west are not marked replicated from east, first %s", wrongOrigin, firstWrong)
	}
	verify(t, chk, "west", checker.Expect{})
}

// faultProxy is a TCP proxy that can cut the link between two clusters: Reset closes every open
// connection (the peers see resets mid-stream), Cut does the same and also refuses new connections
// (a network partition) until Heal.
type faultProxy struct {
	ln     net.Listener
	target string

	delay atomic.Int64 // nanoseconds added before forwarding each chunk read (latency injection)

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func startFaultProxy(t *testing.T, listen, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatalf("fault proxy: listen %s: %v", listen, err)
	}
	p := &faultProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept() // owned by p; ends when Close closes the listener
	t.Cleanup(p.Close)
	return p
}

func (p *faultProxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut := p.cut
		p.mu.Unlock()
		if cut {
			_ = in.Close()
			continue
		}
		out, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = in.Close()
			continue
		}
		if !p.track(in, out) {
			continue
		}
		p.wg.Add(2)
		go p.pipe(in, out) // both end when either side closes (Reset, Cut, Close or the peers)
		go p.pipe(out, in)
	}
}

// track registers a connection pair unless the link was cut meanwhile (then both are closed).
func (p *faultProxy) track(a, b net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		_ = a.Close()
		_ = b.Close()
		return false
	}
	p.conns[a], p.conns[b] = struct{}{}, struct{}{}
	return true
}

func (p *faultProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := time.Duration(p.delay.Load()); d > 0 {
				time.Sleep(d) // injected latency (the fault itself, not a wait for a condition)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

func (p *faultProxy) closeAll() {
	for c := range p.conns {
		_ = c.Close()
	}
}

// SetDelay adds d of latency to every chunk forwarded in either direction (0: none).
func (p *faultProxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// Reset closes every open connection; new ones are accepted.
func (p *faultProxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeAll()
}

// Cut closes every open connection and refuses new ones until Heal.
func (p *faultProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.closeAll()
}

// Heal lets connections through again.
func (p *faultProxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

// Close stops the proxy and waits for its goroutines.
func (p *faultProxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.cut = true
	p.closeAll()
	p.mu.Unlock()
	p.wg.Wait()
}

// replState is the part of east's topic stats about one remote, read as raw JSON (pulsaradmin's
// ReplicatorStats has no lastError).
type replState struct {
	Connected          bool   `json:"connected"`
	ReplicationBacklog int64  `json:"replicationBacklog"`
	LastError          string `json:"lastError"`
}

func replicationState(ctx context.Context, p *harness.Process, topic, remote string) (replState, error) {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return replState{}, err
	}
	url := fmt.Sprintf("%s/admin/v2/%s/stats", p.WebURL(), tn.GetRestPath())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return replState{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return replState{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return replState{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return replState{}, fmt.Errorf("GET %s: HTTP %d: %s", url, resp.StatusCode, body)
	}
	var st struct {
		Replication map[string]replState `json:"replication"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return replState{}, fmt.Errorf("GET %s: %w", url, err)
	}
	r, ok := st.Replication[remote]
	if !ok {
		return replState{}, fmt.Errorf("no replication.%s in the stats of %s", remote, topic)
	}
	return r, nil
}

// TestReplicationSurvivesNetworkFaults puts a TCP fault proxy between east and west: west advertises
// the proxy's address (127.0.0.2, same port), so the replicator's lookups and connections go through
// it. The proxy delays traffic and resets every connection in the middle of a first batch, then partitions the link for
// several seconds while a second batch is produced: east's stats must show connected=false, a
// lastError and a backlog; after the link heals, replication must reconnect within 10 s, the backlog
// return to 0, and west hold every message exactly once, in order.
func TestReplicationSurvivesNetworkFaults(t *testing.T) {
	total := int64(50000)
	if testing.Short() {
		total = 5000
	}
	const partition = 3 * time.Second
	westAddr := harness.FreeAddr(t)
	_, port, _ := net.SplitHostPort(westAddr)
	proxyAddr := net.JoinHostPort("127.0.0.2", port)
	proxy := startFaultProxy(t, proxyAddr, westAddr)

	east := harness.StartStandalone(t, harness.Options{Cluster: "east", Dedup: true})
	west := harness.StartStandalone(t, harness.Options{Cluster: "west", Dedup: true, BrokerAddr: westAddr,
		ExtraArgs: []string{"--advertised-address", "127.0.0.2"}})
	eastAdmin, westAdmin := harness.NewAdmin(t, east), harness.NewAdmin(t, west)
	if err := eastAdmin.Clusters().Create(utils.ClusterData{Name: "west", ServiceURL: west.WebURL(), BrokerServiceURL: "pulsar://" + proxyAddr}); err != nil {
		t.Fatalf("register west in east: %v", err)
	}
	if err := westAdmin.Clusters().Create(utils.ClusterData{Name: "east", ServiceURL: east.WebURL(), BrokerServiceURL: east.ServiceURL()}); err != nil {
		t.Fatalf("register east in west: %v", err)
	}
	for _, c := range []struct {
		name string
		upd  func(utils.TenantData) error
	}{{"east", eastAdmin.Tenants().Update}, {"west", westAdmin.Tenants().Update}} {
		if err := c.upd(utils.TenantData{Name: "public", AllowedClusters: []string{"east", "west"}}); err != nil {
			t.Fatalf("tenant public allowedClusters on %s: %v", c.name, err)
		}
	}
	if err := eastAdmin.Namespaces().SetNamespaceReplicationClusters("public/default", []string{"east", "west"}); err != nil {
		t.Fatalf("public/default replication clusters on east: %v", err)
	}

	runCtx, cancelRun := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancelRun()
	runCtx, cancelEast := east.CrashContext(runCtx)
	defer cancelEast()
	runCtx, cancelWest := west.CrashContext(runCtx)
	defer cancelWest()

	topic := harness.Topic(t)
	chk := checker.New()
	const name = "repl-net-producer"
	const size = 256
	half := total / 2
	for seq := int64(0); seq < total; seq++ {
		chk.Sent(name, seq, size)
	}

	// Batch 1: 5 ms of added latency per forwarded chunk for the first half, and connection resets
	// at a quarter and at a half of it.
	var acked atomic.Int64
	resets := 0
	proxy.SetDelay(5 * time.Millisecond)
	if _, err := runProducerProcessCount(t, runCtx, chk, producerRun{
		url: east.ServiceURL(), topic: topic, name: name, from: 0, n: half, size: size,
	}, func() {
		if n := acked.Add(1); n == half/4 || n == half/2 {
			proxy.Reset()
			resets++
		}
		if acked.Load() == half/2 {
			proxy.SetDelay(0)
		}
	}); err != nil {
		t.Fatal(err)
	}

	// Batch 1 reaches west in full through the (now clean) link before the partition.
	proxy.SetDelay(0)
	batch1Ctx, cancelBatch1 := context.WithTimeout(runCtx, 60*time.Second)
	defer cancelBatch1()
	batch1Start := time.Now()
	if err := harness.WaitFor(batch1Ctx, func(ctx context.Context) error {
		st, err := replicationState(ctx, east, topic, "west")
		if err != nil {
			return err
		}
		if st.ReplicationBacklog != 0 || !st.Connected {
			return fmt.Errorf("backlog %d, connected %v, lastError %q", st.ReplicationBacklog, st.Connected, st.LastError)
		}
		return nil
	}); err != nil {
		t.Fatalf("batch 1 not replicated after the resets: %v", err)
	}
	batch1Drained := time.Since(batch1Start)

	// The partition: cut, wait until east sees it, produce batch 2 while it lasts.
	cutAt := time.Now()
	proxy.Cut()
	var down replState
	waitCtx, cancelWait := context.WithTimeout(runCtx, 10*time.Second)
	defer cancelWait()
	if err := harness.WaitFor(waitCtx, func(ctx context.Context) error {
		st, err := replicationState(ctx, east, topic, "west")
		if err != nil {
			return err
		}
		if st.Connected || st.LastError == "" {
			return fmt.Errorf("during the partition east reports connected=%v lastError=%q", st.Connected, st.LastError)
		}
		down = st
		return nil
	}); err != nil {
		t.Fatalf("east's stats do not show the partition: %v", err)
	}
	sawDown := time.Since(cutAt)
	if _, err := runProducerProcessCount(t, runCtx, chk, producerRun{
		url: east.ServiceURL(), topic: topic, name: name, from: half, n: total - half, size: size,
	}, func() {}); err != nil {
		t.Fatal(err)
	}
	during, err := replicationState(runCtx, east, topic, "west")
	if err != nil {
		t.Fatal(err)
	}
	if during.Connected || during.ReplicationBacklog == 0 {
		t.Errorf("after producing %d messages during the partition east reports connected=%v backlog=%d; want disconnected with a backlog", total-half, during.Connected, during.ReplicationBacklog)
	}
	if rest := partition - time.Since(cutAt); rest > 0 {
		time.Sleep(rest) // the partition's length (a fault being injected, not a wait for a condition)
	}
	proxy.Heal()
	healedAt := time.Now()

	resumeCtx, cancelResume := context.WithTimeout(runCtx, 10*time.Second)
	defer cancelResume()
	if err := harness.WaitFor(resumeCtx, func(ctx context.Context) error {
		st, err := replicationState(ctx, east, topic, "west")
		if err != nil {
			return err
		}
		if !st.Connected {
			return fmt.Errorf("connected=false, backlog %d, lastError %q", st.ReplicationBacklog, st.LastError)
		}
		return nil
	}); err != nil {
		t.Fatalf("replication did not reconnect within 10 s of the partition healing: %v", err)
	}
	reconnected := time.Since(healedAt)
	catchCtx, cancelCatch := context.WithTimeout(runCtx, 60*time.Second)
	defer cancelCatch()
	if err := harness.WaitFor(catchCtx, func(ctx context.Context) error {
		st, err := replicationState(ctx, east, topic, "west")
		if err != nil {
			return err
		}
		if st.ReplicationBacklog != 0 {
			return fmt.Errorf("backlog %d, connected %v", st.ReplicationBacklog, st.Connected)
		}
		return nil
	}); err != nil {
		t.Fatalf("replication backlog did not return to 0: %v", err)
	}
	caughtUp := time.Since(healedAt)
	t.Logf("%d resets during batch 1 (%d messages), its backlog drained %v after the producer finished; partition of %v: east saw it after %v (lastError %q), backlog %d after batch 2 (%d messages); reconnected %v and backlog 0 %v after healing",
		resets, half, batch1Drained.Round(time.Millisecond), partition, sawDown.Round(time.Millisecond), down.LastError, during.ReplicationBacklog, total-half, reconnected.Round(time.Millisecond), caughtUp.Round(time.Millisecond))

	westClient := harness.NewClient(t, west, func(o *pulsar.ClientOptions) { o.OperationTimeout = 30 * time.Second })
	r := newReader(t, westClient, pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	for r.HasNext() {
		m, err := r.Next(catchCtx)
		if err != nil {
			t.Fatalf("reader on west: %v", err)
		}
		chk.Received("west", m.Payload(), m.ID().String())
		if m.GetReplicatedFrom() != "east" {
			t.Fatalf("message %v on west replicated from %q, want east", m.ID(), m.GetReplicatedFrom())
		}
	}
	verify(t, chk, "west", checker.Expect{})
}

// runProducerProcessCount is runProducerProcess returning an error when a send failed.
func runProducerProcessCount(t *testing.T, ctx context.Context, chk *checker.Checker, r producerRun, onAck func()) (int, error) {
	t.Helper()
	failed, firstErr := runProducerProcess(t, ctx, chk, r, onAck)
	if failed > 0 {
		return failed, fmt.Errorf("%d sends failed, first: %v", failed, firstErr)
	}
	return 0, nil
}
