package adminapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Error is a non-2xx answer of the admin API: the HTTP status and Pulsar's {"reason": "..."}.
type Error struct {
	StatusCode int
	Reason     string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%d %s: %s", e.StatusCode, http.StatusText(e.StatusCode), e.Reason)
}

// IsStatus reports whether err is an *Error with the given HTTP status.
func IsStatus(err error, status int) bool {
	var e *Error
	return errors.As(err, &e) && e.StatusCode == status
}

// MaxResponseBytes bounds how much of a response the client reads (stats of large partitioned topics
// can be big, but never unbounded).
const MaxResponseBytes = 64 << 20

// Client is a typed client of the admin REST API. The zero value is not usable; use NewClient.
type Client struct {
	base *url.URL   // the first host
	all  []*url.URL // every host of a multi-host URL (http://h1:8080,h2:8080), base first
	next atomic.Uint32
	http *http.Client
	// UserAgent is sent on every request.
	UserAgent string
}

// NewClient returns a client for the admin API at baseURL (e.g. "http://127.0.0.1:8080"). A URL
// may name several brokers of one cluster, "http://h1:8080,h2:8080": requests go to them in turn,
// and one whose connection is refused is skipped. A nil httpClient uses one with a 30 s timeout.
func NewClient(baseURL string, httpClient *http.Client) (*Client, error) {
	scheme, rest, _ := strings.Cut(strings.TrimRight(baseURL, "/"), "://")
	hosts, path := rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		hosts, path = rest[:i], rest[i:]
	}
	var all []*url.URL
	for _, h := range strings.Split(hosts, ",") {
		u, err := url.Parse(scheme + "://" + strings.TrimSpace(h) + path)
		if err != nil {
			return nil, fmt.Errorf("admin URL %q: %w", baseURL, err)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return nil, fmt.Errorf("admin URL %q: want http:// or https://", baseURL)
		}
		if u.Host == "" {
			return nil, fmt.Errorf("admin URL %q: no host", baseURL)
		}
		all = append(all, u)
	}
	if httpClient == nil {
		httpClient = &http.Client{Timeout: 30 * time.Second}
	}
	return &Client{base: all[0], all: all, http: httpClient, UserAgent: "meridianctl"}, nil
}

// refused reports whether a request failed before it reached a broker (nothing listening), so
// another broker may be asked without doing the request twice.
func refused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// BaseURL returns the admin URL the client talks to (its first host).
func (c *Client) BaseURL() string { return c.base.String() }

// Do sends one request. path is relative to the base URL and already escaped ("/admin/v2/..."). in is
// JSON-encoded when non-nil (a []byte is sent as is); a 2xx answer is decoded into out when out is
// non-nil and the body is not empty. It reports whether the body was non-empty.
func (c *Client) Do(ctx context.Context, method, path string, query url.Values, in, out any) (bool, error) {
	body, _, err := c.DoRaw(ctx, method, path, query, in)
	if err != nil {
		return false, err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return false, nil
	}
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			return true, fmt.Errorf("%s %s: decoding answer: %w", method, path, err)
		}
	}
	return true, nil
}

// DoRaw sends one request and returns the raw body and headers of a 2xx answer.
func (c *Client) DoRaw(ctx context.Context, method, path string, query url.Values, in any) ([]byte, http.Header, error) {
	start := int(c.next.Add(1))
	for i := range c.all {
		base := c.all[(start+i)%len(c.all)]
		body, hdr, err := c.doRawAt(ctx, base, method, path, query, in)
		if err != nil && refused(err) && i < len(c.all)-1 && ctx.Err() == nil {
			continue
		}
		return body, hdr, err
	}
	return nil, nil, errors.New("admin client: no host") // unreachable: NewClient needs one
}

func (c *Client) doRawAt(ctx context.Context, base *url.URL, method, path string, query url.Values, in any) ([]byte, http.Header, error) {
	u := *base
	u.RawPath = base.EscapedPath() + path
	p, err := url.PathUnescape(u.RawPath)
	if err != nil {
		return nil, nil, fmt.Errorf("bad path %q: %w", path, err)
	}
	u.Path = p
	if query != nil {
		u.RawQuery = query.Encode()
	}
	var rd io.Reader
	if in != nil {
		var b []byte
		switch v := in.(type) {
		case []byte:
			b = v
		default:
			if b, err = json.Marshal(in); err != nil {
				return nil, nil, fmt.Errorf("encoding request: %w", err)
			}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.UserAgent)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: %w", method, u.Redacted(), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes))
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: reading answer: %w", method, u.Redacted(), err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		e := &Error{StatusCode: resp.StatusCode}
		var r struct {
			Reason string `json:"reason"`
		}
		if json.Unmarshal(body, &r) == nil && r.Reason != "" {
			e.Reason = r.Reason
		} else {
			e.Reason = strings.TrimSpace(string(body))
		}
		if e.Reason == "" {
			e.Reason = http.StatusText(resp.StatusCode)
		}
		return nil, nil, e
	}
	return body, resp.Header, nil
}

func esc(s string) string { return url.PathEscape(s) }

// ---- brokers ----

// Ready calls GET /admin/v2/brokers/ready.
func (c *Client) Ready(ctx context.Context) error {
	_, _, err := c.DoRaw(ctx, http.MethodGet, "/admin/v2/brokers/ready", nil, nil)
	return err
}

// WaitReady polls /admin/v2/brokers/ready every interval until it answers 200 or ctx ends (then it
// returns the last error).
func (c *Client) WaitReady(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		err := c.Ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("broker at %s not ready: %w (last: %v)", c.base.Redacted(), ctx.Err(), err)
		case <-t.C:
		}
	}
}

// Health calls GET /admin/v2/brokers/health.
func (c *Client) Health(ctx context.Context) error {
	_, _, err := c.DoRaw(ctx, http.MethodGet, "/admin/v2/brokers/health", nil, nil)
	return err
}

// BrokerVersion calls GET /admin/v2/brokers/version: the broker's version as plain text (Pulsar's
// form).
func (c *Client) BrokerVersion(ctx context.Context) (string, error) {
	body, _, err := c.DoRaw(ctx, http.MethodGet, "/admin/v2/brokers/version", nil, nil)
	return strings.TrimSpace(string(body)), err
}

// BrokerBuildInfo calls GET /admin/v2/brokers/build-info (Meridian only; a Pulsar broker answers
// 404).
func (c *Client) BrokerBuildInfo(ctx context.Context) (BuildInfo, error) {
	var out BuildInfo
	_, err := c.Do(ctx, http.MethodGet, "/admin/v2/brokers/build-info", nil, nil, &out)
	return out, err
}

// ---- clusters ----

// ListClusters returns the registered cluster names.
func (c *Client) ListClusters(ctx context.Context) ([]string, error) {
	var out []string
	_, err := c.Do(ctx, http.MethodGet, "/admin/v2/clusters", nil, nil, &out)
	return out, err
}

// GetCluster returns one cluster.
func (c *Client) GetCluster(ctx context.Context, name string) (ClusterData, error) {
	var out ClusterData
	_, err := c.Do(ctx, http.MethodGet, "/admin/v2/clusters/"+esc(name), nil, nil, &out)
	return out, err
}

// CreateCluster registers a cluster (409 if it exists).
func (c *Client) CreateCluster(ctx context.Context, name string, data ClusterData) error {
	_, err := c.Do(ctx, http.MethodPut, "/admin/v2/clusters/"+esc(name), nil, data, nil)
	return err
}

// UpdateCluster replaces a cluster's data.
func (c *Client) UpdateCluster(ctx context.Context, name string, data ClusterData) error {
	_, err := c.Do(ctx, http.MethodPost, "/admin/v2/clusters/"+esc(name), nil, data, nil)
	return err
}

// DeleteCluster removes a cluster.
func (c *Client) DeleteCluster(ctx context.Context, name string) error {
	_, err := c.Do(ctx, http.MethodDelete, "/admin/v2/clusters/"+esc(name), nil, nil, nil)
	return err
}

// ---- tenants ----

// ListTenants returns the tenant names.
func (c *Client) ListTenants(ctx context.Context) ([]string, error) {
	var out []string
	_, err := c.Do(ctx, http.MethodGet, "/admin/v2/tenants", nil, nil, &out)
	return out, err
}

// GetTenant returns one tenant.
func (c *Client) GetTenant(ctx context.Context, name string) (TenantInfo, error) {
	var out TenantInfo
	_, err := c.Do(ctx, http.MethodGet, "/admin/v2/tenants/"+esc(name), nil, nil, &out)
	return out, err
}

// CreateTenant creates a tenant (409 if it exists).
func (c *Client) CreateTenant(ctx context.Context, name string, info TenantInfo) error {
	_, err := c.Do(ctx, http.MethodPut, "/admin/v2/tenants/"+esc(name), nil, info, nil)
	return err
}

// UpdateTenant replaces a tenant's data.
func (c *Client) UpdateTenant(ctx context.Context, name string, info TenantInfo) error {
	_, err := c.Do(ctx, http.MethodPost, "/admin/v2/tenants/"+esc(name), nil, info, nil)
	return err
}

// DeleteTenant removes a tenant (409 while it has namespaces).
func (c *Client) DeleteTenant(ctx context.Context, name string) error {
	_, err := c.Do(ctx, http.MethodDelete, "/admin/v2/tenants/"+esc(name), nil, nil, nil)
	return err
}

// ---- namespaces ----

// ListNamespaces returns "tenant/ns" names of a tenant.
func (c *Client) ListNamespaces(ctx context.Context, tenant string) ([]string, error) {
	var out []string
	_, err := c.Do(ctx, http.MethodGet, "/admin/v2/namespaces/"+esc(tenant), nil, nil, &out)
	return out, err
}

// CreateNamespace creates a namespace; policies may be nil (replication_clusters then defaults to
// the serving cluster).
func (c *Client) CreateNamespace(ctx context.Context, ns string, policies *Policies) error {
	p, err := NamespacePath(ns)
	if err != nil {
		return err
	}
	var in any
	if policies != nil {
		in = policies
	}
	_, err = c.Do(ctx, http.MethodPut, "/admin/v2/namespaces/"+p, nil, in, nil)
	return err
}

// DeleteNamespace deletes a namespace.
func (c *Client) DeleteNamespace(ctx context.Context, ns string, force bool) error {
	p, err := NamespacePath(ns)
	if err != nil {
		return err
	}
	var q url.Values
	if force {
		q = url.Values{"force": {"true"}}
	}
	_, err = c.Do(ctx, http.MethodDelete, "/admin/v2/namespaces/"+p, q, nil, nil)
	return err
}

// GetPolicies returns a namespace's full policies.
func (c *Client) GetPolicies(ctx context.Context, ns string) (Policies, error) {
	var out Policies
	p, err := NamespacePath(ns)
	if err != nil {
		return out, err
	}
	_, err = c.Do(ctx, http.MethodGet, "/admin/v2/namespaces/"+p, nil, nil, &out)
	return out, err
}

// ListNamespaceTopics returns the topics of a namespace (GET .../namespaces/{t}/{ns}/topics).
func (c *Client) ListNamespaceTopics(ctx context.Context, ns string) ([]string, error) {
	var out []string
	p, err := NamespacePath(ns)
	if err != nil {
		return nil, err
	}
	_, err = c.Do(ctx, http.MethodGet, "/admin/v2/namespaces/"+p+"/topics", nil, nil, &out)
	return out, err
}

// GetNamespacePolicy reads one namespace policy endpoint (".../{policy}") into out. It reports
// whether a value was set (false for an empty answer).
func (c *Client) GetNamespacePolicy(ctx context.Context, ns, policy string, query url.Values, out any) (bool, error) {
	p, err := NamespacePath(ns)
	if err != nil {
		return false, err
	}
	return c.Do(ctx, http.MethodGet, "/admin/v2/namespaces/"+p+"/"+policy, query, nil, out)
}

// SetNamespacePolicy writes one namespace policy endpoint with method (POST or PUT).
func (c *Client) SetNamespacePolicy(ctx context.Context, method, ns, policy string, query url.Values, value any) error {
	p, err := NamespacePath(ns)
	if err != nil {
		return err
	}
	_, err = c.Do(ctx, method, "/admin/v2/namespaces/"+p+"/"+policy, query, value, nil)
	return err
}

// RemoveNamespacePolicy deletes one namespace policy.
func (c *Client) RemoveNamespacePolicy(ctx context.Context, ns, policy string, query url.Values) error {
	p, err := NamespacePath(ns)
	if err != nil {
		return err
	}
	_, err = c.Do(ctx, http.MethodDelete, "/admin/v2/namespaces/"+p+"/"+policy, query, nil, nil)
	return err
}

// GetReplicationClusters returns a namespace's replication clusters.
func (c *Client) GetReplicationClusters(ctx context.Context, ns string) ([]string, error) {
	var out []string
	_, err := c.GetNamespacePolicy(ctx, ns, "replication", nil, &out)
	return out, err
}

// SetReplicationClusters replaces a namespace's replication clusters.
func (c *Client) SetReplicationClusters(ctx context.Context, ns string, clusters []string) error {
	return c.SetNamespacePolicy(ctx, http.MethodPost, ns, "replication", nil, clusters)
}

// ---- topics ----

func topicPath(topic string) (string, error) {
	p, err := TopicRESTPath(topic)
	if err != nil {
		return "", err
	}
	return "/admin/v2/" + p, nil
}

// ListTopics returns the non-partitioned topics and partitions of a namespace (persistent domain).
func (c *Client) ListTopics(ctx context.Context, ns string) ([]string, error) {
	var out []string
	p, err := NamespacePath(ns)
	if err != nil {
		return nil, err
	}
	_, err = c.Do(ctx, http.MethodGet, "/admin/v2/persistent/"+p, nil, nil, &out)
	return out, err
}

// ListPartitionedTopics returns the partitioned topics of a namespace.
func (c *Client) ListPartitionedTopics(ctx context.Context, ns string) ([]string, error) {
	var out []string
	p, err := NamespacePath(ns)
	if err != nil {
		return nil, err
	}
	_, err = c.Do(ctx, http.MethodGet, "/admin/v2/persistent/"+p+"/partitioned", nil, nil, &out)
	return out, err
}

// CreateTopic creates a topic: partitioned when partitions > 0, non-partitioned otherwise.
func (c *Client) CreateTopic(ctx context.Context, topic string, partitions int, properties map[string]string) error {
	p, err := topicPath(topic)
	if err != nil {
		return err
	}
	if partitions > 0 {
		_, err = c.Do(ctx, http.MethodPut, p+"/partitions", nil, PartitionedTopicMetadata{Partitions: partitions, Properties: properties}, nil)
		return err
	}
	var in any
	if properties != nil {
		in = properties
	}
	_, err = c.Do(ctx, http.MethodPut, p, nil, in, nil)
	return err
}

// UpdatePartitions raises a partitioned topic's partition count.
func (c *Client) UpdatePartitions(ctx context.Context, topic string, partitions int) error {
	p, err := topicPath(topic)
	if err != nil {
		return err
	}
	_, err = c.Do(ctx, http.MethodPost, p+"/partitions", nil, partitions, nil)
	return err
}

// GetPartitionedMetadata returns the partition count (0 for a non-partitioned topic).
func (c *Client) GetPartitionedMetadata(ctx context.Context, topic string) (PartitionedTopicMetadata, error) {
	var out PartitionedTopicMetadata
	p, err := topicPath(topic)
	if err != nil {
		return out, err
	}
	_, err = c.Do(ctx, http.MethodGet, p+"/partitions", nil, nil, &out)
	return out, err
}

// DeleteTopic deletes a topic; partitioned selects the partitioned-topic endpoint.
func (c *Client) DeleteTopic(ctx context.Context, topic string, partitioned, force bool) error {
	p, err := topicPath(topic)
	if err != nil {
		return err
	}
	if partitioned {
		p += "/partitions"
	}
	_, err = c.Do(ctx, http.MethodDelete, p, url.Values{"force": {strconv.FormatBool(force)}}, nil, nil)
	return err
}

// TopicStats returns a (non-partitioned or partition) topic's stats.
func (c *Client) TopicStats(ctx context.Context, topic string) (TopicStats, error) {
	var out TopicStats
	p, err := topicPath(topic)
	if err != nil {
		return out, err
	}
	_, err = c.Do(ctx, http.MethodGet, p+"/stats", nil, nil, &out)
	return out, err
}

// PartitionedTopicStats returns a partitioned topic's aggregated stats.
func (c *Client) PartitionedTopicStats(ctx context.Context, topic string, perPartition bool) (PartitionedTopicStats, error) {
	var out PartitionedTopicStats
	p, err := topicPath(topic)
	if err != nil {
		return out, err
	}
	_, err = c.Do(ctx, http.MethodGet, p+"/partitioned-stats", url.Values{"perPartition": {strconv.FormatBool(perPartition)}}, nil, &out)
	return out, err
}

// InternalStats returns a topic's log and cursor state.
func (c *Client) InternalStats(ctx context.Context, topic string) (PersistentTopicInternalStats, error) {
	var out PersistentTopicInternalStats
	p, err := topicPath(topic)
	if err != nil {
		return out, err
	}
	_, err = c.Do(ctx, http.MethodGet, p+"/internalStats", nil, nil, &out)
	return out, err
}

// LastMessageID returns the id of the last stored message.
func (c *Client) LastMessageID(ctx context.Context, topic string) (MessageID, error) {
	var out MessageID
	p, err := topicPath(topic)
	if err != nil {
		return out, err
	}
	_, err = c.Do(ctx, http.MethodGet, p+"/lastMessageId", nil, nil, &out)
	return out, err
}

// MessageIDByTimestamp returns the first message published at or after ts.
func (c *Client) MessageIDByTimestamp(ctx context.Context, topic string, ts time.Time) (MessageID, error) {
	var out MessageID
	p, err := topicPath(topic)
	if err != nil {
		return out, err
	}
	_, err = c.Do(ctx, http.MethodGet, p+"/messageid/"+strconv.FormatInt(ts.UnixMilli(), 10), nil, nil, &out)
	return out, err
}

// Unload closes the topic on its broker; clients reconnect.
func (c *Client) Unload(ctx context.Context, topic string) error {
	p, err := topicPath(topic)
	if err != nil {
		return err
	}
	_, err = c.Do(ctx, http.MethodPut, p+"/unload", nil, nil, nil)
	return err
}

// GetTopicPolicy reads one topic-level policy; it reports whether a value was set.
func (c *Client) GetTopicPolicy(ctx context.Context, topic, policy string, query url.Values, out any) (bool, error) {
	p, err := topicPath(topic)
	if err != nil {
		return false, err
	}
	return c.Do(ctx, http.MethodGet, p+"/"+policy, query, nil, out)
}

// SetTopicPolicy writes one topic-level policy with method (POST or PUT).
func (c *Client) SetTopicPolicy(ctx context.Context, method, topic, policy string, query url.Values, value any) error {
	p, err := topicPath(topic)
	if err != nil {
		return err
	}
	_, err = c.Do(ctx, method, p+"/"+policy, query, value, nil)
	return err
}

// RemoveTopicPolicy deletes one topic-level policy.
func (c *Client) RemoveTopicPolicy(ctx context.Context, topic, policy string, query url.Values) error {
	p, err := topicPath(topic)
	if err != nil {
		return err
	}
	_, err = c.Do(ctx, http.MethodDelete, p+"/"+policy, query, nil, nil)
	return err
}

// Lookup returns where a topic is served.
func (c *Client) Lookup(ctx context.Context, topic string) (LookupData, error) {
	var out LookupData
	p, err := TopicRESTPath(topic)
	if err != nil {
		return out, err
	}
	_, err = c.Do(ctx, http.MethodGet, "/lookup/v2/topic/"+p, nil, nil, &out)
	return out, err
}

// ---- subscriptions ----

// ListSubscriptions returns a topic's subscriptions.
func (c *Client) ListSubscriptions(ctx context.Context, topic string) ([]string, error) {
	var out []string
	p, err := topicPath(topic)
	if err != nil {
		return nil, err
	}
	_, err = c.Do(ctx, http.MethodGet, p+"/subscriptions", nil, nil, &out)
	return out, err
}

// CreateSubscription creates a durable subscription starting at id (Latest, Earliest or a position).
func (c *Client) CreateSubscription(ctx context.Context, topic, sub string, id MessageID) error {
	p, err := topicPath(topic)
	if err != nil {
		return err
	}
	_, err = c.Do(ctx, http.MethodPut, p+"/subscription/"+esc(sub), nil, id, nil)
	return err
}

// DeleteSubscription deletes a subscription (force disconnects its consumers).
func (c *Client) DeleteSubscription(ctx context.Context, topic, sub string, force bool) error {
	p, err := topicPath(topic)
	if err != nil {
		return err
	}
	_, err = c.Do(ctx, http.MethodDelete, p+"/subscription/"+esc(sub), url.Values{"force": {strconv.FormatBool(force)}}, nil, nil)
	return err
}

// ResetCursor moves a subscription to a message id.
func (c *Client) ResetCursor(ctx context.Context, topic, sub string, id MessageID) error {
	p, err := topicPath(topic)
	if err != nil {
		return err
	}
	_, err = c.Do(ctx, http.MethodPost, p+"/subscription/"+esc(sub)+"/resetcursor", nil, id, nil)
	return err
}

// ResetCursorToTime moves a subscription to the first message published at or after ts.
func (c *Client) ResetCursorToTime(ctx context.Context, topic, sub string, ts time.Time) error {
	p, err := topicPath(topic)
	if err != nil {
		return err
	}
	_, err = c.Do(ctx, http.MethodPost, p+"/subscription/"+esc(sub)+"/resetcursor/"+strconv.FormatInt(ts.UnixMilli(), 10), nil, nil, nil)
	return err
}

// SkipMessages skips n messages of a subscription's backlog.
func (c *Client) SkipMessages(ctx context.Context, topic, sub string, n int64) error {
	p, err := topicPath(topic)
	if err != nil {
		return err
	}
	_, err = c.Do(ctx, http.MethodPost, p+"/subscription/"+esc(sub)+"/skip/"+strconv.FormatInt(n, 10), nil, nil, nil)
	return err
}

// ClearBacklog skips a subscription's whole backlog.
func (c *Client) ClearBacklog(ctx context.Context, topic, sub string) error {
	p, err := topicPath(topic)
	if err != nil {
		return err
	}
	_, err = c.Do(ctx, http.MethodPost, p+"/subscription/"+esc(sub)+"/skip_all", nil, nil, nil)
	return err
}

// ExpireMessages acknowledges a subscription's messages older than seconds.
func (c *Client) ExpireMessages(ctx context.Context, topic, sub string, seconds int64) error {
	p, err := topicPath(topic)
	if err != nil {
		return err
	}
	_, err = c.Do(ctx, http.MethodPost, p+"/subscription/"+esc(sub)+"/expireMessages/"+strconv.FormatInt(seconds, 10), nil, nil, nil)
	return err
}

// PeekMessage returns the n-th (1-based) message of a subscription's backlog.
func (c *Client) PeekMessage(ctx context.Context, topic, sub string, n int) (RawMessage, error) {
	p, err := topicPath(topic)
	if err != nil {
		return RawMessage{}, err
	}
	body, h, err := c.DoRaw(ctx, http.MethodGet, p+"/subscription/"+esc(sub)+"/position/"+strconv.Itoa(n), nil, nil)
	if err != nil {
		return RawMessage{}, err
	}
	return RawMessageFromHeaders(h, body)
}

// RawMessageFromHeaders rebuilds a RawMessage from a peek answer.
func RawMessageFromHeaders(h http.Header, body []byte) (RawMessage, error) {
	m := RawMessage{Payload: body, Properties: map[string]string{}}
	id, err := ParseMessageID(h.Get(HeaderMessageID))
	if err != nil {
		return m, err
	}
	m.ID = id
	m.PublishTime = ParseHeaderTime(h.Get(HeaderPublishTime))
	m.EventTime = ParseHeaderTime(h.Get(HeaderEventTime))
	if v := h.Get(HeaderNumBatchMessage); v != "" {
		m.Batched = true
		m.NumBatchMessages, _ = strconv.Atoi(v)
	}
	if v := h.Get(HeaderProperties); v != "" {
		_ = json.Unmarshal([]byte(v), &m.Properties)
	}
	m.PartitionKey = h.Get(HeaderPartitionKey)
	m.ProducerName = h.Get(HeaderProducerName)
	m.SequenceID, _ = strconv.ParseInt(h.Get(HeaderSequenceID), 10, 64)
	m.ReplicatedFrom = h.Get(HeaderReplicatedFrom)
	return m, nil
}

// headerTimeLayout is how Pulsar's broker writes times in headers (ISO 8601, UTC, milliseconds).
const headerTimeLayout = "2006-01-02T15:04:05.000Z07:00"

// FormatHeaderTime formats ms since the epoch for the X-Pulsar-*-Time headers.
func FormatHeaderTime(ms int64) string { return time.UnixMilli(ms).UTC().Format(headerTimeLayout) }

// ParseHeaderTime reads an X-Pulsar-*-Time header (ISO 8601, or ms since the epoch); 0 if absent.
func ParseHeaderTime(s string) int64 {
	if s == "" {
		return 0
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UnixMilli()
	}
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// Response headers of the peek and get-message endpoints (Pulsar's names; Go canonicalises case).
const (
	HeaderMessageID       = "X-Pulsar-Message-ID"
	HeaderPublishTime     = "X-Pulsar-Publish-Time"
	HeaderEventTime       = "X-Pulsar-Event-Time"
	HeaderNumBatchMessage = "X-Pulsar-Num-Batch-Message"
	HeaderPropertyPrefix  = "X-Pulsar-Property-"
	HeaderProperties      = "X-Pulsar-Property"
	HeaderPartitionKey    = "X-Pulsar-Partition-Key"
	HeaderProducerName    = "X-Pulsar-Producer-Name"
	HeaderSequenceID      = "X-Pulsar-Sequence-Id"
	HeaderReplicatedFrom  = "X-Pulsar-Replicated-From"
	HeaderCompression     = "X-Pulsar-Compression"
	HeaderUncompressed    = "X-Pulsar-Uncompressed-Size"
)

// ---- schemas ----

// SchemaPayload registers a schema (`POST /admin/v2/schemas/.../schema`).
type SchemaPayload struct {
	Type       string            `json:"type"`
	Schema     string            `json:"schema"`
	Properties map[string]string `json:"properties"`
}

// SchemaResponse is one stored schema version.
type SchemaResponse struct {
	Version    int64             `json:"version"`
	Type       string            `json:"type"`
	Timestamp  int64             `json:"timestamp"`
	Data       string            `json:"data"`
	Properties map[string]string `json:"properties"`
}

// schemaPath is /admin/v2/schemas/<tenant>/<ns>/<local> (schemas have no domain in the path).
func schemaPath(topic string) (string, error) {
	p, err := TopicRESTPath(topic)
	if err != nil {
		return "", err
	}
	_, rest, _ := strings.Cut(p, "/")
	return "/admin/v2/schemas/" + rest, nil
}

// GetSchema returns the latest schema, or one version when version >= 0.
func (c *Client) GetSchema(ctx context.Context, topic string, version int64) (SchemaResponse, error) {
	var out SchemaResponse
	p, err := schemaPath(topic)
	if err != nil {
		return out, err
	}
	p += "/schema"
	if version >= 0 {
		p += "/" + strconv.FormatInt(version, 10)
	}
	_, err = c.Do(ctx, http.MethodGet, p, nil, nil, &out)
	return out, err
}

// UploadSchema registers a schema and returns its version.
func (c *Client) UploadSchema(ctx context.Context, topic string, s SchemaPayload) (int64, error) {
	p, err := schemaPath(topic)
	if err != nil {
		return 0, err
	}
	var out struct {
		Version int64 `json:"version"`
	}
	_, err = c.Do(ctx, http.MethodPost, p+"/schema", nil, s, &out)
	return out.Version, err
}

// DeleteSchema deletes a topic's schema (force erases its whole history).
func (c *Client) DeleteSchema(ctx context.Context, topic string, force bool) error {
	p, err := schemaPath(topic)
	if err != nil {
		return err
	}
	_, err = c.Do(ctx, http.MethodDelete, p+"/schema", url.Values{"force": {strconv.FormatBool(force)}}, nil, nil)
	return err
}

// TranslatePosition maps a position of cluster on topic to this cluster: id (nil for none) through
// the inbound replication index, exactly or, with atOrBefore, to the greatest position of cluster
// below it that arrived here; when that finds nothing and publishTime is not zero, the first message
// published at or after it (approximate).
func (c *Client) TranslatePosition(ctx context.Context, topic, cluster string, id *MessageID, atOrBefore bool, publishTime time.Time) (PositionTranslation, error) {
	var out PositionTranslation
	p, err := topicPath(topic)
	if err != nil {
		return out, err
	}
	q := url.Values{"cluster": {cluster}}
	if id != nil {
		q.Set("messageId", fmt.Sprintf("%d:%d", id.LedgerID, id.EntryID))
	}
	if atOrBefore {
		q.Set("atOrBefore", "true")
	}
	if !publishTime.IsZero() {
		q.Set("publishTime", strconv.FormatInt(publishTime.UnixMilli(), 10))
	}
	_, err = c.Do(ctx, http.MethodGet, p+"/translatePosition", q, nil, &out)
	return out, err
}

// GetMessageByID returns the message stored at (ledger, entry) of topic.
func (c *Client) GetMessageByID(ctx context.Context, topic string, ledger, entry int64) (RawMessage, error) {
	p, err := topicPath(topic)
	if err != nil {
		return RawMessage{}, err
	}
	body, h, err := c.DoRaw(ctx, http.MethodGet, p+"/ledger/"+strconv.FormatInt(ledger, 10)+"/entry/"+strconv.FormatInt(entry, 10), nil, nil)
	if err != nil {
		return RawMessage{}, err
	}
	return RawMessageFromHeaders(h, body)
}
