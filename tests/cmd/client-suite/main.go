// Command client-suite runs the Pulsar Go client's own integration tests (a writable copy of
// github.com/apache/pulsar-client-go) against a broker that is already listening on
// localhost:6650/8080, one test per process, and writes a per-test result table and a per-area
// summary. scripts/client-suite.sh prepares the copy and the broker and calls it; see
// docs/compatibility.md.
//
// Each selected test runs as `<pkg>.test -test.run '^Name$'` in its own process, so a panic or a
// hang (bounded by -timeout) costs one test, not the rest of the run.
//
// Areas: a test belongs to seek, batching, compression or partitioned when its name says so
// (Seek, Batch, Compress/LZ4/ZLib/ZSTD/Snappy, Partition), otherwise to its file's area (producer,
// consumer, reader, admin-<file>). "needs" lists what else the test's body uses (docker, tls, auth,
// txn, schema, key_shared, dlq, chunking, ...); tests needing docker, tls, auth or txn are out of
// scope against a broker without security and reported separately. With -secured (the broker runs
// with the client CI's standalone.conf: TLS, authentication, authorization) tls and auth tests are
// in scope; docker and txn ones stay out.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"
)

// pkgSpec is one package of the client module to test, and which of its test files to select.
type pkgSpec struct {
	dir   string   // relative to the module root
	files []string // test files to select; empty: all
}

var defaultPkgs = []pkgSpec{
	{"pulsar", []string{
		"producer_test.go", "consumer_test.go", "reader_test.go",
		"consumer_multitopic_test.go", "consumer_zero_queue_test.go", "client_impl_with_slog_test.go",
	}},
	{"pulsaradmin/pkg/admin", nil},
}

type testCase struct {
	Pkg     string
	File    string
	Name    string
	Area    string
	Needs   []string
	InScope bool

	Status  string // pass, flaky (passed on a retry), fail, skip, timeout, panic, notrun
	Seconds float64
	Reason  string
}

func main() {
	src := flag.String("src", "", "writable copy of github.com/apache/pulsar-client-go (required)")
	out := flag.String("out", "", "output directory for results.tsv, summary.md and logs/ (required)")
	timeout := flag.Duration("timeout", 3*time.Minute, "per-test timeout")
	race := flag.Bool("race", false, "build the test binaries with -race")
	jobs := flag.Int("jobs", 1, "tests run concurrently (they share one broker)")
	run := flag.String("run", "", "only tests whose name matches this regexp")
	skip := flag.String("skip", "", "skip tests whose name matches this regexp")
	all := flag.Bool("all", false, "select every test file of the packages, not only the default areas")
	listOnly := flag.Bool("list", false, "print the selection and exit")
	inScopeOnly := flag.Bool("in-scope-only", false, "skip tests that need Docker, TLS, authentication or transactions (by source scan)")
	secured := flag.Bool("secured", false, "the broker runs with TLS, authentication and authorization as the client's CI runs Pulsar: tests needing TLS or authentication are in scope")
	retries := flag.Int("retries", 1, "runs of a failed test again (alone, after the others); one that then passes counts as passed and is listed as flaky with its first failure")
	flag.Parse()
	if *secured {
		outOfScope = []string{"docker", "txn"}
	}
	if *src == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	var runRE, skipRE *regexp.Regexp
	if *run != "" {
		runRE = regexp.MustCompile(*run)
	}
	if *skip != "" {
		skipRE = regexp.MustCompile(*skip)
	}
	if err := os.MkdirAll(filepath.Join(*out, "logs"), 0o755); err != nil {
		log.Fatal(err)
	}

	var cases []*testCase
	bins := map[string]string{}
	for _, spec := range defaultPkgs {
		bin, err := buildTestBinary(*src, spec.dir, *out, *race)
		if err != nil {
			log.Fatalf("build %s: %v", spec.dir, err)
		}
		bins[spec.dir] = bin
		names, err := listTests(bin, filepath.Join(*src, spec.dir))
		if err != nil {
			log.Fatalf("list %s: %v", spec.dir, err)
		}
		funcs, err := parseTestFuncs(filepath.Join(*src, spec.dir))
		if err != nil {
			log.Fatalf("parse %s: %v", spec.dir, err)
		}
		for _, name := range names {
			f, ok := funcs[name]
			if !ok {
				continue
			}
			if !*all && len(spec.files) > 0 && !contains(spec.files, f.file) {
				continue
			}
			if runRE != nil && !runRE.MatchString(name) || skipRE != nil && skipRE.MatchString(name) {
				continue
			}
			needs := markers(f.body)
			if *inScopeOnly && !inScope(needs) {
				continue
			}
			cases = append(cases, &testCase{
				Pkg: spec.dir, File: f.file, Name: name,
				Area: area(spec.dir, f.file, name), Needs: needs, InScope: inScope(needs),
			})
		}
	}
	if *listOnly {
		for _, c := range cases {
			fmt.Printf("%s\t%s\t%s\t%s\t%s\n", c.Area, c.Pkg, c.File, c.Name, strings.Join(c.Needs, ","))
		}
		return
	}

	log.Printf("running %d tests, %d at a time, timeout %v each", len(cases), *jobs, *timeout)
	work := make(chan *testCase)
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	for i := 0; i < max(1, *jobs); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range work {
				runOne(c, bins[c.Pkg], filepath.Join(*src, c.Pkg), *out, *timeout)
				mu.Lock()
				done++
				log.Printf("[%d/%d] %-7s %6.1fs %s %s", done, len(cases), c.Status, c.Seconds, c.Name, c.Reason)
				mu.Unlock()
			}
		}()
	}
	for _, c := range cases {
		work <- c
	}
	close(work)
	wg.Wait()
	// A failed test is run again on its own: several of the client's tests are timing-sensitive
	// unit tests (TestCachedTracker gives a background flush 10 ms) that a loaded machine fails.
	for _, c := range cases {
		for try := 0; try < *retries && failed(c) && c.InScope; try++ {
			first := *c
			_ = os.Rename(logFile(c, *out), strings.TrimSuffix(logFile(c, *out), ".log")+fmt.Sprintf(".try%d.log", try))
			runOne(c, bins[c.Pkg], filepath.Join(*src, c.Pkg), *out, *timeout)
			if c.Status == "pass" {
				c.Status, c.Reason = "flaky", fmt.Sprintf("passed on retry %d; first run: %s: %s", try+1, first.Status, first.Reason)
			}
			log.Printf("[retry %d] %-7s %6.1fs %s %s", try+1, c.Status, c.Seconds, c.Name, c.Reason)
		}
	}

	if err := writeTSV(filepath.Join(*out, "results.tsv"), cases); err != nil {
		log.Fatal(err)
	}
	summary := summarize(cases)
	if *secured {
		summary += securityGroups(cases)
	}
	if err := os.WriteFile(filepath.Join(*out, "summary.md"), []byte(summary), 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Print(summary)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func buildTestBinary(src, pkg, out string, race bool) (string, error) {
	bin := filepath.Join(out, "bin", strings.ReplaceAll(pkg, "/", "_")+".test")
	args := []string{"test", "-c", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	args = append(args, "./"+pkg)
	cmd := exec.Command("go", args...)
	cmd.Dir = src
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, b)
	}
	return bin, nil
}

func listTests(bin, dir string) ([]string, error) {
	cmd := exec.Command(bin, "-test.list", ".")
	cmd.Dir = dir
	b, err := cmd.Output()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "Test") {
			names = append(names, strings.TrimSpace(line))
		}
	}
	return names, nil
}

type testFunc struct {
	file string
	body string
}

// parseTestFuncs maps every top-level Test function of dir's _test.go files to its file and source.
func parseTestFuncs(dir string) (map[string]testFunc, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	funcs := map[string]testFunc{}
	for _, path := range files {
		srcBytes, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		f, err := parser.ParseFile(fset, path, srcBytes, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || !strings.HasPrefix(fd.Name.Name, "Test") {
				continue
			}
			start := fset.Position(fd.Pos()).Offset
			end := fset.Position(fd.End()).Offset
			funcs[fd.Name.Name] = testFunc{file: filepath.Base(path), body: string(srcBytes[start:end])}
		}
	}
	return funcs, nil
}

var areaByName = []struct {
	re   *regexp.Regexp
	area string
}{
	{regexp.MustCompile(`Seek`), "seek"},
	{regexp.MustCompile(`(?i)compress|lz4|zlib|zstd|snappy`), "compression"},
	{regexp.MustCompile(`Batch`), "batching"},
	{regexp.MustCompile(`Partition`), "partitioned"},
}

func area(pkg, file, name string) string {
	if strings.HasPrefix(pkg, "pulsaradmin") {
		return "admin-" + strings.TrimSuffix(file, "_test.go")
	}
	for _, a := range areaByName {
		if a.re.MatchString(name) {
			return a.area
		}
	}
	switch {
	case strings.HasPrefix(file, "producer"):
		return "producer"
	case strings.HasPrefix(file, "consumer"):
		return "consumer"
	case strings.HasPrefix(file, "reader"):
		return "reader"
	}
	return strings.TrimSuffix(file, "_test.go")
}

var needMarkers = []struct {
	re   *regexp.Regexp
	need string
}{
	{regexp.MustCompile(`testcontainers|Docker|docker`), "docker"},
	{regexp.MustCompile(`pulsar\+ssl|serviceURLTLS|webServiceURLTLS|TLSTrustCertsFilePath|caCertsPath`), "tls"},
	{regexp.MustCompile(`NewAuthentication|tokenFilePath|newAuthTopicName|OAuth|oauth`), "auth"},
	{regexp.MustCompile(`Transaction|Txn`), "txn"},
	{regexp.MustCompile(`Schema\(|NewJSONSchema|NewAvroSchema|NewProtoSchema|NewStringSchema|NewBytesSchema|Schema:`), "schema"},
	{regexp.MustCompile(`KeyShared`), "key_shared"},
	{regexp.MustCompile(`DLQ|DeadLetter|RetryEnable|ReconsumeLater`), "dlq"},
	{regexp.MustCompile(`EnableChunking`), "chunking"},
	{regexp.MustCompile(`DeliverAfter|DeliverAt`), "delayed"},
	{regexp.MustCompile(`Failover`), "failover"},
	{regexp.MustCompile(`Nack\(|NackID`), "nack"},
	{regexp.MustCompile(`NonPersistent|non-persistent`), "non_persistent"},
	{regexp.MustCompile(`GetStats|GetInternalStats|/stats`), "stats"},
	{regexp.MustCompile(`TopicsPattern`), "regex"},
	{regexp.MustCompile(`Encryption|Decryption`), "encryption"},
	{regexp.MustCompile(`backlogQuota|BacklogQuota`), "backlog_quota"},
	{regexp.MustCompile(`/terminate|Terminate\(`), "terminate"},
	{regexp.MustCompile(`ProducerAccessMode`), "access_mode"},
	{regexp.MustCompile(`PeekMessages|GetMessageByID|GetMessageID\(|GetMessagesByID`), "peek"},
	{regexp.MustCompile(`Unload\(|/unload`), "unload"},
}

func markers(body string) []string {
	var needs []string
	for _, m := range needMarkers {
		if m.re.MatchString(body) {
			needs = append(needs, m.need)
		}
	}
	return needs
}

// outOfScope are the needs that put a test out of scope: Docker and transactions always; TLS and
// authentication unless -secured.
var outOfScope = []string{"docker", "tls", "auth", "txn"}

// inScope: a test needs nothing of outOfScope.
func inScope(needs []string) bool {
	for _, n := range needs {
		if contains(outOfScope, n) {
			return false
		}
	}
	return true
}

var (
	failLine   = regexp.MustCompile(`^\s*(Error:|Messages:|panic:|.*_test\.go:\d+:)`)
	timeoutMsg = "panic: test timed out"
)

// logFile is where runOne keeps the output of c.
func logFile(c *testCase, out string) string {
	return filepath.Join(out, "logs", strings.ReplaceAll(c.Pkg, "/", "_")+"."+c.Name+".log")
}

func runOne(c *testCase, bin, dir, out string, timeout time.Duration) {
	logPath := logFile(c, out)
	ctx, cancel := context.WithTimeout(context.Background(), timeout+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-test.run", "^"+c.Name+"$", "-test.v", "-test.count", "1",
		"-test.timeout", timeout.String())
	cmd.Dir = dir
	var buf bytes.Buffer
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	start := time.Now()
	err := cmd.Run()
	c.Seconds = time.Since(start).Seconds()
	_ = os.WriteFile(logPath, buf.Bytes(), 0o644)
	output := buf.String()
	switch {
	case strings.Contains(output, timeoutMsg) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		c.Status = "timeout"
	case strings.Contains(output, "--- PASS: "+c.Name+" "):
		c.Status = "pass"
	case strings.Contains(output, "--- SKIP: "+c.Name+" "):
		c.Status = "skip"
	case strings.Contains(output, "--- FAIL: "+c.Name+" "):
		c.Status = "fail"
	case strings.Contains(output, "panic:"):
		c.Status = "panic"
	case strings.Contains(output, "testing: warning: no tests to run"):
		c.Status = "notrun"
	case err != nil:
		c.Status = "fail"
	default:
		c.Status = "pass"
	}
	if c.Status != "pass" {
		c.Reason = reason(output, c.Status)
	}
	// Some tests reach Docker through helpers the source scan does not follow.
	if strings.Contains(output, "Docker not found") || strings.Contains(output, "testcontainers") {
		if !contains(c.Needs, "docker") {
			c.Needs = append(c.Needs, "docker")
		}
		c.InScope = false
	}
}

// reason extracts a one-line explanation from a failed test's output.
func reason(output, status string) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(output))
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if status == "skip" && strings.Contains(line, "_test.go:") {
			lines = append(lines, line)
			continue
		}
		if failLine.MatchString(sc.Text()) && !strings.HasPrefix(line, "Error Trace:") {
			lines = append(lines, line)
		}
		if len(lines) >= 3 {
			break
		}
	}
	if status == "timeout" {
		lines = append([]string{"timed out"}, lines...)
	}
	r := strings.Join(lines, " | ")
	r = strings.Join(strings.Fields(r), " ")
	if len(r) > 300 {
		r = r[:300] + "..."
	}
	return r
}

func writeTSV(path string, cases []*testCase) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	fmt.Fprintln(w, "area\tpkg\tfile\ttest\tin_scope\tneeds\tstatus\tseconds\treason")
	for _, c := range cases {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%v\t%s\t%s\t%.1f\t%s\n", c.Area, c.Pkg, c.File, c.Name, c.InScope,
			strings.Join(c.Needs, ","), c.Status, c.Seconds, strings.ReplaceAll(c.Reason, "\t", " "))
	}
	return w.Flush()
}

// failed reports whether c ran and did not pass (what -retries runs again).
func failed(c *testCase) bool {
	switch c.Status {
	case "pass", "flaky", "skip", "notrun":
		return false
	}
	return true
}

type tally struct{ total, pass, fail, skip int }

func (t *tally) add(c *testCase) {
	t.total++
	switch c.Status {
	case "pass", "flaky":
		t.pass++
	case "skip", "notrun":
		t.skip++
	default:
		t.fail++
	}
}

func pct(a, b int) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(a)/float64(b))
}

func summarize(cases []*testCase) string {
	var b strings.Builder
	all := map[string]*tally{}
	scoped := map[string]*tally{}
	var areas []string
	var totAll, totScoped tally
	for _, c := range cases {
		if all[c.Area] == nil {
			all[c.Area] = &tally{}
			scoped[c.Area] = &tally{}
			areas = append(areas, c.Area)
		}
		all[c.Area].add(c)
		totAll.add(c)
		if c.InScope {
			scoped[c.Area].add(c)
			totScoped.add(c)
		}
	}
	sort.Strings(areas)
	fmt.Fprintf(&b, "# pulsar-client-go v0.19.0 integration tests against Meridian (%s)\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "In scope = not needing %s. Pass rate = passed / (total - skipped).\n\n", strings.Join(outOfScope, ", "))
	b.WriteString("| area | in scope: passed | failed | skipped | total | pass rate | all: passed | failed | skipped | total |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	row := func(name string, s, a *tally) {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %s | %d | %d | %d | %d |\n", name,
			s.pass, s.fail, s.skip, s.total, pct(s.pass, s.total-s.skip), a.pass, a.fail, a.skip, a.total)
	}
	for _, a := range areas {
		row(a, scoped[a], all[a])
	}
	row("**total**", &totScoped, &totAll)
	b.WriteString("\n## Failures\n\n| area | test | in scope | needs | status | reason |\n|---|---|---|---|---|---|\n")
	for _, c := range cases {
		if !failed(c) {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %v | %s | %s | %s |\n", c.Area, c.Name, c.InScope, strings.Join(c.Needs, ","),
			c.Status, strings.ReplaceAll(c.Reason, "|", "\\|"))
	}
	b.WriteString("\n## Passed only on a retry (counted as passed)\n\n| area | test | in scope | first failure |\n|---|---|---|---|\n")
	for _, c := range cases {
		if c.Status == "flaky" {
			fmt.Fprintf(&b, "| %s | %s | %v | %s |\n", c.Area, c.Name, c.InScope, strings.ReplaceAll(c.Reason, "|", "\\|"))
		}
	}
	return b.String()
}

// securityGroupPatterns are the client's TLS, authentication and HTTP-lookup tests, by name (the first
// group that matches counts): what -secured brings into scope.
var securityGroupPatterns = []struct {
	name string
	re   *regexp.Regexp
}{
	{"OAuth2", regexp.MustCompile(`(?i)oauth`)},
	{"basic", regexp.MustCompile(`BasicAuth`)},
	{"token", regexp.MustCompile(`Token`)},
	{"TLS client certificate", regexp.MustCompile(`TLSAuth|HTTPSAuth`)},
	{"TLS transport", regexp.MustCompile(`TLS|HTTPS`)},
	{"HTTP lookup", regexp.MustCompile(`HTTP|WebURL|HttpHosts`)},
}

// securityGroups tallies the tests of securityGroupPatterns.
func securityGroups(cases []*testCase) string {
	var b strings.Builder
	b.WriteString("\n## TLS, authentication and HTTP lookup (by test name)\n\n| group | passed | failed | skipped | total | tests |\n|---|---|---|---|---|---|\n")
	var tot tally
	for _, g := range securityGroupPatterns {
		var t tally
		var names []string
		for _, c := range cases {
			if groupOf(c.Name) == g.name {
				t.add(c)
				tot.add(c)
				names = append(names, c.Name)
			}
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %s |\n", g.name, t.pass, t.fail, t.skip, t.total, strings.Join(names, ", "))
	}
	fmt.Fprintf(&b, "| **total** | %d | %d | %d | %d | |\n", tot.pass, tot.fail, tot.skip, tot.total)
	return b.String()
}

func groupOf(name string) string {
	for _, g := range securityGroupPatterns {
		if g.re.MatchString(name) {
			return g.name
		}
	}
	return ""
}
