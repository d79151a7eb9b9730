package admin_test

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/meridian-mq/meridian/internal/admin"
	"github.com/meridian-mq/meridian/internal/metadata/memstore"
	"github.com/meridian-mq/meridian/internal/schema"
)

var updateTranscript = flag.Bool("update-transcript", false, "rewrite testdata/routes.transcript from the handler's answers")

const transcriptFile = "testdata/routes.transcript"

// TestRouteTranscript sends a fixed script of requests to every namespace, topic, subscription and
// schema route, good and bad (malformed bodies, missing tenants, namespaces and topics, invalid
// names, no topic service), and compares every answer's status, Content-Type and body with
// testdata/routes.transcript, line by line. Pulsar's clients depend on these answers to the byte;
// a change that alters one shows here as the route and request whose answer moved. After an
// intended change, rewrite the file with
//
//	go test ./internal/admin -run TestRouteTranscript -update-transcript
func TestRouteTranscript(t *testing.T) {
	var out bytes.Buffer
	recordTranscript(t, &out)
	if *updateTranscript {
		if err := os.WriteFile(transcriptFile, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(transcriptFile)
	if err != nil {
		t.Fatalf("%v (create it with -update-transcript)", err)
	}
	gotLines, wantLines := strings.Split(out.String(), "\n"), strings.Split(string(want), "\n")
	diffs := 0
	for i := 0; i < max(len(gotLines), len(wantLines)); i++ {
		var g, w string
		if i < len(gotLines) {
			g = gotLines[i]
		}
		if i < len(wantLines) {
			w = wantLines[i]
		}
		if g != w {
			t.Errorf("%s:%d:\n got  %s\n want %s", transcriptFile, i+1, g, w)
			if diffs++; diffs == 20 {
				t.Fatal("more differences follow")
			}
		}
	}
}

// transcriptEnv is newEnv's admin API (the fake topic service, with the real schema registry, or
// with neither); routes lists the patterns the script covers.
type transcriptEnv struct {
	*env
	routes []string
	out    io.Writer
}

func newTranscriptEnv(t *testing.T, out io.Writer, withServices bool) *transcriptEnv {
	t.Helper()
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	e := newEnvWith(t, s, func(cfg *admin.Config) {
		if withServices {
			cfg.Schemas = schema.New(s, schema.Options{})
		} else {
			cfg.Topics = nil
		}
	})
	var routes []string
	for _, p := range e.h.Patterns() {
		if strings.Contains(p, "/admin/v2/namespaces/{tenant}/") || strings.Contains(p, "/admin/v2/persistent/") ||
			strings.Contains(p, "/admin/v2/non-persistent/") || strings.Contains(p, "/admin/v2/schemas/") {
			routes = append(routes, p)
		}
	}
	sort.Strings(routes)
	return &transcriptEnv{env: e, routes: routes, out: out}
}

// volatile hides what changes from run to run (creation times).
var volatile = regexp.MustCompile(`("(?:creationTimestamp|timestamp|topicCreationTimeStamp|publishTime)":)\d{13}`)

// send makes one request and writes one transcript line: request, status, Content-Type, body.
func (e *transcriptEnv) send(method, path, body string) int {
	e.t.Helper()
	status, b, hdr := e.call(method, path, body)
	shown := strings.ReplaceAll(volatile.ReplaceAllString(b, "${1}T"), "\n", `\n`)
	ct := strings.TrimPrefix(hdr.Get("Content-Type"), "application/")
	fmt.Fprintf(e.out, "%s %s %s -> %d %s %s\n", method, strings.TrimPrefix(path, "/admin/v2/"), body, status, ct, shown)
	return status
}

// pathValues fills a pattern's wildcards other than tenant, namespace and topic.
var pathValues = strings.NewReplacer("{subscription}", "sub1", "{role}", "role1", "{key}", "k1", "{value}", "v1",
	"{bundle}", "0x00000000_0xffffffff", "{timestamp}", "1000", "{n}", "1", "{seconds}", "10", "{ledger}", "0",
	"{entry}", "0", "{version}", "0")

// fill makes a request path from a pattern for tenant/namespace (and topic); on cluster routes,
// tenant names the cluster.
func fill(pattern, tenant, namespace, topic string) (method, path string) {
	method, path, _ = strings.Cut(pattern, " ")
	path = strings.NewReplacer("{tenant}", tenant, "{cluster}", tenant, "{namespace}", namespace, "{topic}", topic).Replace(path)
	return method, pathValues.Replace(path)
}

// sampleBodies are plausible good bodies by the last segment of a route's path.
var sampleBodies = map[string]string{
	"retention":                             `{"retentionTimeInMinutes":60,"retentionSizeInMB":100}`,
	"persistence":                           `{"bookkeeperEnsemble":2,"bookkeeperWriteQuorum":2,"bookkeeperAckQuorum":1,"managedLedgerMaxMarkDeleteRate":0}`,
	"bookieAffinity":                        `{"bookkeeperAffinityGroupPrimary":"g1"}`,
	"autoTopicCreation":                     `{"allowAutoTopicCreation":true,"topicType":"partitioned","defaultNumPartitions":2}`,
	"autoSubscriptionCreation":              `{"allowAutoSubscriptionCreation":true}`,
	"inactiveTopicPolicies":                 `{"inactiveTopicDeleteMode":"delete_when_no_subscriptions","maxInactiveDurationSeconds":60,"deleteWhileInactive":true}`,
	"delayedDelivery":                       `{"active":true,"tickTime":1000}`,
	"entryFilters":                          `{"entryFilterNames":"f1"}`,
	"dispatchRate":                          `{"dispatchThrottlingRateInMsg":10,"dispatchThrottlingRateInByte":1000,"ratePeriodInSecond":1}`,
	"subscriptionDispatchRate":              `{"dispatchThrottlingRateInMsg":11,"dispatchThrottlingRateInByte":1100,"ratePeriodInSecond":1}`,
	"replicatorDispatchRate":                `{"dispatchThrottlingRateInMsg":12,"dispatchThrottlingRateInByte":1200,"ratePeriodInSecond":1}`,
	"subscribeRate":                         `{"subscribeThrottlingRatePerConsumer":3,"ratePeriodInSecond":30}`,
	"publishRate":                           `{"publishThrottlingRateInMsg":5,"publishThrottlingRateInByte":500}`,
	"backlogQuota":                          `{"limitSize":1048576,"limitTime":60,"policy":"producer_exception"}`,
	"replication":                           `["standalone","west"]`,
	"properties":                            `{"a":"1","b":"2"}`,
	"schemaCompatibilityStrategy":           `"FULL"`,
	"schemaAutoUpdateCompatibilityStrategy": `"Backward"`,
	"subscriptionAuthMode":                  `"Prefix"`,
	"antiAffinity":                          `group1`,
	"subscriptionTypesEnabled":              `["Shared","Failover"]`,
	"offloadPolicies":                       `{"managedLedgerOffloadDriver":"s3","managedLedgerOffloadBucket":"b"}`,
	"encryptionRequired":                    `"true"`,
	"schemaValidationEnforced":              `true`,
	"replicateSubscriptionState":            `true`,
	"replicatedSubscriptionStatus":          `true`,
	"deduplication":                         `true`,
	"deduplicationEnabled":                  `true`,
	"isAllowAutoUpdateSchema":               `false`,
	"dispatcherPauseOnAckStatePersistent":   `true`,
	"partitions":                            `2`,
	"resetcursor":                           `{"ledgerId":0,"entryId":0,"partitionIndex":-1}`,
	"schema":                                `{"type":"STRING","schema":"","properties":{"p":"q"}}`,
	"version":                               `{"type":"STRING","schema":"","properties":{"p":"q"}}`,
	"compatibility":                         `{"type":"JSON","schema":"{}","properties":null}`,
	"subscription":                          `["role1","role2"]`,
	"sub1":                                  `["role1","role2"]`,
	"role1":                                 `["produce","consume"]`,
	"migration":                             `true`,
	"c1":                                    `{"serviceUrl":"http://c1:8080","brokerServiceUrl":"pulsar://c1:6650"}`,
	"nope":                                  `{"serviceUrl":"http://c1:8080","brokerServiceUrl":"pulsar://c1:6650"}`,
	"t1":                                    `{"adminRoles":["ops"],"allowedClusters":["c1"]}`,
	"peers":                                 `["west"]`,
	"replicatorRoles":                       `["repl1","repl2"]`,
	"migrate":                               `{"serviceUrl":"http://west:8080"}`,
	"bundles":                               `{"numBundles":4}`,
}

// sample is the good body for a path, or 5 (most policies are numbers).
func sample(path string) string {
	p, _, _ := strings.Cut(path, "?")
	if b, ok := sampleBodies[p[strings.LastIndex(p, "/")+1:]]; ok {
		return b
	}
	return "5"
}

// badBodies are tried on every write: empty, malformed, and values of every JSON kind.
var badBodies = []string{"", "{", "null", "-1", "true", `"x"`, "{}"}

// destructive reports the topic routes that take a topic or subscription away; they run last.
func destructive(pattern string) bool {
	if strings.HasSuffix(pattern, "/terminate") || strings.HasSuffix(pattern, "{topic}/unload") {
		return true
	}
	for _, s := range []string{"{namespace}/{topic}", "{topic}/partitions", "/subscription/{subscription}"} {
		if strings.HasPrefix(pattern, "DELETE ") && strings.HasSuffix(pattern, s) {
			return true
		}
	}
	return false
}

const nsPattern = "/admin/v2/namespaces/{tenant}/{namespace}"

// methodOrder is the order a path's routes run in: read, write, read back, remove.
var methodOrder = map[string]int{"GET": 0, "PUT": 1, "POST": 2, "DELETE": 3}

// byPath groups route patterns by path, methods in methodOrder, paths sorted.
func byPath(patterns []string) (paths []string, methods map[string][]string) {
	methods = map[string][]string{}
	for _, p := range patterns {
		m, path, _ := strings.Cut(p, " ")
		if _, seen := methods[path]; !seen {
			paths = append(paths, path)
		}
		methods[path] = append(methods[path], m)
	}
	sort.Strings(paths)
	for _, ms := range methods {
		sort.Slice(ms, func(i, j int) bool { return methodOrder[ms[i]] < methodOrder[ms[j]] })
	}
	return paths, methods
}

// queryVariants are extra requests with query parameters, by the route's last segment.
var queryVariants = map[string][]string{
	"backlogQuota":      {"?backlogQuotaType=message_age", "?backlogQuotaType=bogus"},
	"messageTTL":        {"?messageTTL=30", "?messageTTL=abc", "?messageTTL=-2"},
	"properties":        {"?key=a", "?key="},
	"topics":            {"?mode=ALL", "?mode=NON_PERSISTENT", "?mode=bogus"},
	"stats":             {"?getPreciseBacklog=true&excludePublishers=true"},
	"partitioned-stats": {"?perPartition=false"},
	"partitions":        {"?checkAllowAutoCreation=true"},
	"sub1":              {"?replicated=true"},
	"schema":            {"?force=true"},
	"migrate":           {"?migrated=true", "?migrated=false"},
}

func variants(path string) []string {
	out := []string{path}
	for _, suffix := range slices.Sorted(maps.Keys(queryVariants)) {
		if strings.HasSuffix(path, "/"+suffix) {
			for _, q := range queryVariants[suffix] {
				out = append(out, path+q)
			}
		}
	}
	return out
}

// exercise sends the script of one path's routes for one target. In full: GET (for a topic also
// with ?applied=true, which falls back to the namespace's policy), every write method with every
// bad body and the sample, each success read back, DELETE and a read back, and the sample once
// more so that the value stays set for what follows. Otherwise: GET, and each write with a
// malformed body and the sample.
func (e *transcriptEnv) exercise(pattern string, methods []string, tenant, namespace, topic string, full bool) {
	_, path := fill("GET "+pattern, tenant, namespace, topic)
	hasGet := slices.Contains(methods, "GET")
	for _, p := range variants(path) {
		var setMethod string
		for _, m := range methods {
			switch {
			case m == "GET":
				e.send(m, p, "")
				if topic != "" && full && !strings.Contains(p, "?") {
					e.send(m, p+"?applied=true", "")
				}
			case m == "DELETE" || !full:
				bodies := []string{""}
				if m != "DELETE" {
					bodies = []string{"{", sample(p)}
				}
				for _, b := range bodies {
					if st := e.send(m, p, b); st < 300 && hasGet && full {
						e.send("GET", p, "")
					}
				}
			default:
				setMethod = m
				for _, b := range append(slices.Clone(badBodies), sample(p)) {
					if st := e.send(m, p, b); st < 300 && hasGet {
						e.send("GET", p, "")
					}
				}
			}
		}
		if full && setMethod != "" && slices.Contains(methods, "DELETE") {
			e.send(setMethod, p, sample(p))
		}
	}
}

func recordTranscript(t *testing.T, out io.Writer) {
	e := newTranscriptEnv(t, out, true)
	fmt.Fprintln(out, "# namespaces")
	paths, methods := byPath(e.routes)
	for _, p := range paths {
		if !strings.HasPrefix(p, "/admin/v2/namespaces/") {
			continue
		}
		ms := methods[p]
		if p == nsPattern {
			ms = slices.DeleteFunc(slices.Clone(ms), func(m string) bool { return m == "DELETE" })
		}
		e.exercise(p, ms, "public", "default", "", true)
		e.exercise(p, ms, "public", "nope", "", false)
		e.exercise(p, ms, "nope", "default", "", false)
		e.exercise(p, ms, "public", "bad*ns", "", false)
	}
	// Namespaces created with each kind of body, and the policies left set above read back whole.
	e.send("PUT", "/admin/v2/namespaces/public/scratch", "")
	e.send("PUT", "/admin/v2/namespaces/public/scratch", "")
	e.send("PUT", "/admin/v2/namespaces/public/scratch2", `{"numBundles":8}`)
	e.send("PUT", "/admin/v2/namespaces/public/scratch3", `{"replication_clusters":["mars"]}`)
	e.send("PUT", "/admin/v2/namespaces/public/scratch4", `{`)
	e.send("GET", "/admin/v2/namespaces/public/scratch", "")
	e.send("GET", "/admin/v2/namespaces/public/default", "")

	fmt.Fprintln(out, "# topics")
	for _, domain := range []string{"persistent", "non-persistent"} {
		nsPath := "/admin/v2/" + domain + "/public/default"
		e.send("PUT", nsPath+"/t1", "")
		e.send("PUT", nsPath+"/t2", `{"k":"v"}`)
		e.send("PUT", nsPath+"/p1/partitions", "2")
		for _, tp := range []string{"t1", "p1"} {
			e.send("PUT", nsPath+"/"+tp+"/subscription/sub1", "")
			e.send("PUT", nsPath+"/"+tp+"/subscription/sub2", `{"ledgerId":-1,"entryId":-1,"properties":{"x":"y"}}`)
		}
	}
	var later []string
	for _, p := range paths {
		if strings.HasPrefix(p, "/admin/v2/namespaces/") {
			continue
		}
		var ms []string
		for _, m := range methods[p] {
			if destructive(m + " " + p) {
				later = append(later, m+" "+p)
			} else {
				ms = append(ms, m)
			}
		}
		if len(ms) == 0 {
			continue
		}
		persistent := !strings.HasPrefix(p, "/admin/v2/non-persistent/")
		for _, topic := range []string{"t1", "p1", "p1-partition-0", "missing"} {
			e.exercise(p, ms, "public", "default", topic, persistent && topic == "t1")
			if !persistent {
				break
			}
		}
		e.exercise(p, ms, "public", "nope", "t1", false)
		e.exercise(p, ms, "public", "default", "bad%20name", false)
	}
	fmt.Fprintln(out, "# destructive, last: unload, terminate, subscriptions, then topics")
	rank := func(r string) int {
		for i, s := range []string{"/unload", "/terminate", "/subscription/{subscription}"} {
			if strings.HasSuffix(r, s) {
				return i
			}
		}
		return 3
	}
	sort.SliceStable(later, func(i, j int) bool { return rank(later[i]) < rank(later[j]) })
	for _, r := range later {
		m, p, _ := strings.Cut(r, " ")
		for _, topic := range []string{"missing", "p1-partition-0", "t1", "p1", "t1", "p1"} {
			e.exercise(p, []string{m}, "public", "default", topic, false)
		}
	}
	e.exercise(nsPattern, []string{"DELETE"}, "public", "scratch", "", false)
	e.exercise(nsPattern, []string{"DELETE"}, "public", "default", "", false)
	e.send("DELETE", "/admin/v2/namespaces/public/default?force=true", "")
	e.exercise(nsPattern, []string{"DELETE"}, "public", "scratch", "", false)

	fmt.Fprintln(out, "# clusters and tenants")
	var clusterRoutes []string
	for _, p := range e.h.Patterns() {
		if strings.Contains(p, " /admin/v2/clusters/") || strings.Contains(p, " /admin/v2/tenants/") || strings.HasSuffix(p, " /admin/v2/brokers/{cluster}") {
			clusterRoutes = append(clusterRoutes, p)
		}
	}
	paths, methods = byPath(clusterRoutes)
	for _, p := range paths {
		ms := methods[p]
		if strings.HasSuffix(p, "/{cluster}") || strings.HasSuffix(p, "/{tenant}") {
			ms = slices.DeleteFunc(slices.Clone(ms), func(m string) bool { return m == "DELETE" })
		}
		name := "c1"
		if strings.Contains(p, "/tenants/") {
			name = "t1"
		}
		e.exercise(p, ms, name, "", "", true)
		e.exercise(p, ms, "nope", "", "", false)
		e.exercise(p, ms, "bad%2Fname", "", "", false)
	}
	for _, target := range []string{"tenants/t1", "clusters/c1", "clusters/west", "tenants/public", "tenants/nope", "clusters/nope", "tenants/bad%2Fname", "clusters/bad%2Fname"} {
		e.send("DELETE", "/admin/v2/"+target, "")
	}

	fmt.Fprintln(out, "# no topic service, no schema registry")
	bare := newTranscriptEnv(t, out, false)
	paths, methods = byPath(bare.routes)
	for _, p := range paths {
		if strings.HasPrefix(p, "/admin/v2/namespaces/") {
			continue
		}
		bare.exercise(p, methods[p], "public", "default", "t1", false)
		bare.exercise(p, methods[p], "public", "nope", "t1", false)
	}
	bare.send("POST", "/admin/v2/namespaces/public/default/clearBacklog", "")
	bare.send("PUT", "/admin/v2/namespaces/public/default/unload", "")
	bare.send("DELETE", "/admin/v2/namespaces/public/default", "")
}
