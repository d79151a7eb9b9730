package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// A minimal reader of the Prometheus text exposition format (version 0.0.4), enough to check the
// replication series a broker exports on /metrics the way a Prometheus server would see them.

// promSample is one line of a scrape: a metric name, its labels and its value.
type promSample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// promScrape is a whole /metrics answer.
type promScrape []promSample

// scrapePromMetrics GETs base+"/metrics" and parses it.
func scrapePromMetrics(ctx context.Context, base string) (promScrape, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s/metrics: %w", base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("GET %s/metrics: HTTP %d: %s", base, resp.StatusCode, body)
	}
	return parsePromText(io.LimitReader(resp.Body, 64<<20))
}

// parsePromText parses the text exposition format: comment lines are skipped; every other line is
// `name{label="value",...} value [timestamp]`.
func parsePromText(r io.Reader) (promScrape, error) {
	var out promScrape
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		smp, err := parsePromLine(s)
		if err != nil {
			return nil, fmt.Errorf("metrics line %d %q: %w", line, s, err)
		}
		out = append(out, smp)
	}
	return out, sc.Err()
}

func parsePromLine(s string) (promSample, error) {
	smp := promSample{Labels: map[string]string{}}
	i := strings.IndexAny(s, "{ ")
	if i <= 0 {
		return smp, fmt.Errorf("no metric name")
	}
	smp.Name = s[:i]
	rest := s[i:]
	if rest[0] == '{' {
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, " ,")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.IndexByte(rest, '=')
			if eq <= 0 || len(rest) < eq+2 || rest[eq+1] != '"' {
				return smp, fmt.Errorf("bad label")
			}
			name := rest[:eq]
			rest = rest[eq+2:]
			var val strings.Builder
			closed := false
			for j := 0; j < len(rest); j++ {
				c := rest[j]
				if c == '\\' && j+1 < len(rest) {
					j++
					switch rest[j] {
					case 'n':
						val.WriteByte('\n')
					default:
						val.WriteByte(rest[j])
					}
					continue
				}
				if c == '"' {
					rest = rest[j+1:]
					closed = true
					break
				}
				val.WriteByte(c)
			}
			if !closed {
				return smp, fmt.Errorf("unterminated label value")
			}
			smp.Labels[name] = val.String()
		}
	}
	fields := strings.Fields(rest)
	if len(fields) < 1 {
		return smp, fmt.Errorf("no value")
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return smp, fmt.Errorf("value: %w", err)
	}
	smp.Value = v
	return smp, nil
}

// find returns the samples named name whose labels include every pair in labels.
func (p promScrape) find(name string, labels map[string]string) []promSample {
	var out []promSample
	for _, s := range p {
		if s.Name != name {
			continue
		}
		ok := true
		for k, v := range labels {
			if s.Labels[k] != v {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, s)
		}
	}
	return out
}

// value returns the value of the one sample named name with labels, or an error if there is not
// exactly one.
func (p promScrape) value(name string, labels map[string]string) (float64, error) {
	got := p.find(name, labels)
	if len(got) != 1 {
		return 0, fmt.Errorf("%d samples of %s%v, want 1", len(got), name, labels)
	}
	return got[0].Value, nil
}

func TestReplLifecycleParsePromText(t *testing.T) {
	in := `# HELP pulsar_replication_backlog Entries not yet replicated.
# TYPE pulsar_replication_backlog gauge
pulsar_replication_backlog{cluster="east",namespace="public/default",remote_cluster="west",topic="persistent://public/default/t"} 30
pulsar_replication_connected_count{cluster="east",namespace="public/default",remote_cluster="west",topic="persistent://public/default/t"} 0
meridian_replicators_running{cluster="east"} 1
go_goroutines 42
odd{a="x\"y\\z"} 1.5e+06 1700000000000
`
	p, err := parsePromText(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(p) != 5 {
		t.Fatalf("got %d samples: %+v", len(p), p)
	}
	v, err := p.value("pulsar_replication_backlog", map[string]string{"remote_cluster": "west", "topic": "persistent://public/default/t"})
	if err != nil || v != 30 {
		t.Fatalf("backlog = %v, %v", v, err)
	}
	if v, err := p.value("go_goroutines", nil); err != nil || v != 42 {
		t.Fatalf("go_goroutines = %v, %v", v, err)
	}
	if s := p.find("odd", nil); len(s) != 1 || s[0].Labels["a"] != `x"y\z` || s[0].Value != 1.5e6 {
		t.Fatalf("odd = %+v", s)
	}
	if _, err := parsePromText(strings.NewReader("bad{a=1} 2\n")); err == nil {
		t.Fatal("malformed label accepted")
	}
}
