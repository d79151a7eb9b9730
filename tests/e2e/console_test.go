package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/chromedp/chromedp"
	"github.com/golang-jwt/jwt/v5"

	"github.com/meridian-mq/meridian/internal/node"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// chromium finds Debian's Chromium (or another Chrome) for the browser tests. Without one the test
// is skipped, except in CI (CI=true), where .ci/run installs the chromium package.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no Chromium on PATH: .ci/run installs the chromium package")
	}
	t.Skip("no Chromium on PATH (apt-get install chromium)")
	return ""
}

// TestConsoleInBrowser: the replication console in a real headless Chromium. Two clusters, a
// replicating to b; the page shows both clusters and the link; with b down and a producer running on
// a, the backlog in the table grows and the chart moves; the page logs no errors. With
// MERIDIAN_CONSOLE_SCREENSHOTS=<dir> it saves screenshots of the healthy and the broken link.
func TestConsoleInBrowser(t *testing.T) {
	browser := chromium(t)
	cs := harness.StartClusters(t, harness.ClustersOptions{Node: func(_ string, o *node.Options) {
		o.ConsoleInterval = 200 * time.Millisecond
	}}, "a", "b")
	harness.RegisterEachOther(t, cs...)
	a, b := cs[0], cs[1]
	for _, c := range cs {
		c.SetTenant(t, "public", "a", "b")
	}
	a.SetReplicationClusters(t, "public/default", "a", "b")
	topic := harness.Topic(t)
	producer, err := a.Client(t).CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	send := func(n int) {
		for i := range n {
			if _, err := producer.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint("m", i))}); err != nil {
				t.Errorf("send: %v", err)
				return
			}
		}
	}
	// A replicated subscription, consumed and acknowledged on a: its sync with b shows in the console.
	consumer, err := a.Client(t).Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "app",
		ReplicateSubscriptionState: true, SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	send(20)
	for range 20 {
		m, err := consumer.Receive(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := consumer.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	a.WaitReplicationCaughtUp(t, 30*time.Second, topic, "b")

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("headless", true), chromedp.WindowSize(1280, 900))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(allocCtx)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	defer cancelTimeout()
	// The page's console errors, uncaught exceptions and error entries of the browser log.
	var mu sync.Mutex
	var pageErrors []string
	consoleCtx, stopConsole := context.WithCancel(ctx)
	messages := chromedp.Console(consoleCtx)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.IsException() || m.Type == "error" {
				mu.Lock()
				pageErrors = append(pageErrors, m.String())
				mu.Unlock()
			}
		}
	}()
	defer func() { stopConsole(); <-readerDone }()
	shots := os.Getenv("MERIDIAN_CONSOLE_SCREENSHOTS")
	screenshot := func(name string) {
		if shots == "" {
			return
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		if err := os.WriteFile(filepath.Join(shots, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	row := fmt.Sprintf(`tr[data-topic=%q][data-remote="b"]`, topic)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(a.WebURL()+"/console/"),
		chromedp.WaitVisible(`body[data-loaded="true"]`),
		chromedp.WaitVisible(`g[data-cluster="a"]`),
		chromedp.WaitVisible(`g[data-cluster="b"]`),
		chromedp.WaitVisible(`line[data-remote="b"][data-direction="out"]`),
		chromedp.WaitVisible(row+`[data-state="ok"]`),
		chromedp.WaitVisible(fmt.Sprintf(`#subscriptions tr[data-topic=%q][data-subscription="app"][data-remote="b"]`, topic)),
		chromedp.WaitVisible(row+` svg.spark.rateOut polyline`),
	); err != nil {
		t.Fatalf("the page with two clusters and a healthy link: %v", err)
	}
	// The failover check from the page: b is reachable and has the namespace.
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(`#fo-namespace`, "public/default"),
		chromedp.SetValue(`#fo-target`, "b"),
		chromedp.Click(`#failover button`),
		chromedp.WaitVisible(`#fo-result tr[data-check="target reachable"][data-status="ok"]`),
		chromedp.WaitVisible(`#fo-result tr[data-check="namespace"][data-status="ok"]`),
	); err != nil {
		t.Fatalf("the failover check on the page: %v", err)
	}
	screenshot("console-healthy.png")

	// The link goes down and a keeps publishing: the backlog grows, in the table and in the chart.
	if err := b.InProcess.Close(); err != nil {
		t.Fatalf("stop b: %v", err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				send(5)
				time.Sleep(50 * time.Millisecond) // paces the producer; not a wait for a condition
			}
		}
	}()
	defer func() { close(stop); <-done }()
	if err := chromedp.Do(ctx, chromedp.WaitVisible(row+`[data-state="disconnected"]`)); err != nil {
		t.Fatalf("the link shown disconnected: %v", err)
	}
	// backlog reads the link's backlog cell and chart in one script run, so both come from the same
	// rendering: the page replaces the row on every refresh, and separate queries could read a row
	// being replaced (its cell empty). A row not on the page yet is an error to read again.
	type backlogView struct {
		Text   string `json:"text"`
		Points string `json:"points"`
	}
	readBacklog := fmt.Sprintf(`(() => {
		const r = document.querySelector(%s);
		const cell = r && r.querySelector("td.backlog"), line = r && r.querySelector("svg.spark.backlog polyline");
		return cell && line ? {text: cell.textContent, points: line.getAttribute("points")} : null;
	})()`, strconv.Quote(row))
	backlog := func() (int, string, error) {
		view, err := chromedp.Run(ctx, chromedp.Evaluate[*backlogView](readBacklog))
		if err != nil {
			return 0, "", fmt.Errorf("read the backlog cell and chart: %w", err)
		}
		if view == nil {
			return 0, "", fmt.Errorf("no row with a backlog cell and chart for %s", row)
		}
		n, err := strconv.Atoi(strings.TrimSpace(view.Text))
		if err != nil {
			t.Fatalf("backlog cell %q: %v", view.Text, err)
		}
		return n, view.Points, nil
	}
	var first int
	var firstChart string
	harness.Eventually(t, 30*time.Second, "the backlog cell and chart", func() (err error) {
		first, firstChart, err = backlog()
		return err
	})
	harness.Eventually(t, 30*time.Second, "the backlog growing and the chart moving while b is down", func() error {
		n, chart, err := backlog()
		if err != nil {
			return err
		}
		if n <= first || chart == firstChart {
			return fmt.Errorf("backlog %d -> %d, chart moved %v", first, n, chart != firstChart)
		}
		t.Logf("backlog %d -> %d while b is down; the chart moved", first, n)
		return nil
	})
	screenshot("console-link-down.png")
	// With b down the check says not ready.
	if err := chromedp.Do(ctx,
		chromedp.Click(`#failover button`),
		chromedp.WaitVisible(`#fo-verdict[data-verdict="not-ready"]`),
		chromedp.WaitVisible(`#fo-result tr[data-check="target reachable"][data-status="fail"]`),
	); err != nil {
		t.Fatalf("the failover check with b down: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(pageErrors) > 0 {
		t.Fatalf("the page logged errors: %v", pageErrors)
	}
}

// TestConsoleLoginWithToken: with authentication and authorization on, the console's page loads
// without credentials and asks for a token; a role that is not a superuser is refused; a superuser's
// token shows the console.
func TestConsoleLoginWithToken(t *testing.T) {
	browser := chromium(t)
	secret := []byte("meridian-e2e-secret-key-32-bytes")
	secretFile := filepath.Join(t.TempDir(), "secret.key")
	if err := os.WriteFile(secretFile, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	b := startTLSBroker(t, fmt.Sprintf("authenticationEnabled=true\nauthenticationProviders=%s\ntokenSecretKey=file://%s\nauthorizationEnabled=true\nsuperUserRoles=root\n", tokenProvider, secretFile))
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("headless", true))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(allocCtx)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second)
	defer cancelTimeout()
	if err := chromedp.Do(ctx,
		chromedp.Navigate(b.WebURL()+"/console/"),
		chromedp.WaitVisible(`#login`),
		chromedp.SendKeys(`#login-token`, hsToken(t, secret, jwt.MapClaims{"sub": "app"})),
		chromedp.Click(`#login button`),
		chromedp.WaitVisible(`#login`),
	); err != nil {
		t.Fatalf("a role that is not a superuser: %v", err)
	}
	why, err := chromedp.Run(ctx, chromedp.Text(`#login-why`))
	if err != nil || !strings.Contains(why, "superuser") {
		t.Fatalf("login form says %q (%v), want that a superuser is needed", why, err)
	}
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(`#login-token`, hsToken(t, secret, jwt.MapClaims{"sub": "root"})),
		chromedp.Click(`#login button`),
		chromedp.WaitVisible(`body[data-loaded="true"]`),
		chromedp.WaitNotVisible(`#login`),
	); err != nil {
		t.Fatalf("a superuser's token: %v", err)
	}
}
