package main

import (
	"net"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/brokertest"
)

// What a newcomer meets first: the documented examples, exit codes, hints and timeouts.

// TestDocumentedDoubleDashExampleWorks runs docs/cli.md's example of a value that starts with "-"
// exactly as written there.
func TestDocumentedDoubleDashExampleWorks(t *testing.T) {
	doc, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("`meridianctl ([^`]* -- -[^`]*)`").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/cli.md has no example of a value after --")
	}
	url := server(t)
	args := strings.Fields(string(m[1]))
	mustCtl(t, url, args...)
	// The value arrived as given: read the policy back.
	p := regexp.MustCompile(`^(\S+) set-policy (?:--method \S+ )?(\S+) (\S+) -- (\S+)$`).FindStringSubmatch(string(m[1]))
	if p == nil {
		t.Fatalf("unexpected form of the example %q", m[1])
	}
	if out := mustCtl(t, url, p[1], "get-policy", p[2], p[3]); strings.TrimSpace(out) != p[4] {
		t.Fatalf("%s get-policy %s %s = %q, want %s", p[1], p[2], p[3], out, p[4])
	}
}

func TestClientSideNameErrorsAreUsageErrors(t *testing.T) {
	url := server(t)
	for _, args := range [][]string{
		{"topics", "stats", "a/b/c/d"},
		{"topics", "stats", "public/default/a b"},
		{"topics", "create", "public/de fault/t"},
		{"namespaces", "policies", "pub lic/default"},
		{"--service-url", "pulsar://127.0.0.1:1", "produce", "public/default/a b", "-m", "x"},
		{"--service-url", "pulsar://127.0.0.1:1", "consume", "a/b/c/d", "-s", "s"},
	} {
		if r := ctl(t, url, args...); r.code != 2 || !strings.Contains(r.stderr, "--help") {
			t.Errorf("meridianctl %q: exit %d (want 2, a usage error)\n%s", args, r.code, r.stderr)
		}
	}
}

func TestServiceURLFailuresHintAtServiceURL(t *testing.T) {
	url := server(t)
	for _, args := range [][]string{
		{"produce", "x", "-m", "hi"},
		{"consume", "x", "-s", "s"},
	} {
		r := ctl(t, url, append([]string{"--service-url", "pulsar://127.0.0.1:1"}, args...)...)
		if r.code != 1 || !strings.Contains(r.stderr, "hint:") || !strings.Contains(r.stderr, "--service-url") || strings.Contains(r.stderr, "--admin-url") {
			t.Errorf("meridianctl %q against a closed port: exit %d\n%s", args, r.code, r.stderr)
		}
	}
}

// silentListener accepts connections and never answers; it holds them until the test ends.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "pulsar://" + ln.Addr().String()
}

func TestProduceConsumeTimeOutOnASilentListener(t *testing.T) {
	url := server(t)
	silent := silentListener(t)
	for _, args := range [][]string{
		{"produce", "x", "-m", "hi"},
		{"consume", "x", "-s", "s"},
		{"perf", "produce", "x", "-n", "1"},
	} {
		began := time.Now()
		r := ctl(t, url, append([]string{"--service-url", silent, "--timeout", "300ms"}, args...)...)
		took := time.Since(began)
		if r.code != 1 || !strings.Contains(r.stderr, "no answer within 300ms (--timeout)") || !strings.Contains(r.stderr, "--service-url") {
			t.Errorf("meridianctl %q against a silent listener: exit %d\n%s", args, r.code, r.stderr)
		}
		// The flag bounds each step; the whole command is a few steps.
		if took > 10*time.Second {
			t.Errorf("meridianctl %q took %v with --timeout 300ms", args, took)
		}
	}
}

func TestBrokerErrorsSayItOnceWithTheNextStep(t *testing.T) {
	b := brokertest.Start(t)
	r := ctlBroker(t, b, "topics", "stats", "public/default/missing")
	if r.code != 1 || strings.Count(strings.ToLower(r.stderr), "not found") != 1 {
		t.Errorf("stats of a missing topic: exit %d, want 'not found' said once:\n%s", r.code, r.stderr)
	}
	r = ctlBroker(t, b, "produce", "public/nope/t", "-m", "hi")
	if r.code != 1 || !strings.Contains(r.stderr, "hint: create the namespace: meridianctl namespaces create public/nope") {
		t.Errorf("produce to a missing namespace: exit %d\n%s", r.code, r.stderr)
	}
	r = ctlBroker(t, b, "consume", "public/nope/t", "-s", "s")
	if r.code != 1 || !strings.Contains(r.stderr, "meridianctl namespaces create public/nope") {
		t.Errorf("consume from a missing namespace: exit %d\n%s", r.code, r.stderr)
	}
}
