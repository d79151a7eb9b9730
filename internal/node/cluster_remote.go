package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/admin"
	"github.com/meridian-mq/meridian/internal/cluster"
	"github.com/meridian-mq/meridian/internal/naming"
)

// Admin calls that span topics (a partitioned topic's, a namespace's) are answered by whichever
// broker is asked, but each topic lives on its bundle's owner: the broker asks the owners of the
// topics it does not serve through their admin API, with the caller's credentials
// (docs/cluster.md). This file holds the request and the calls that create, delete and report;
// cluster_forward.go the rest of the topic service's calls.

// remoteCallTimeout bounds one call to another broker of the cluster.
const remoteCallTimeout = 30 * time.Second

// maxRemoteBody bounds a peer's answer.
const maxRemoteBody = 16 << 20

// remoteTopic reports whether another broker owns topic, and that broker's web base URL. A topic
// whose bundle nobody owns yet was never created.
func (m *clusterMember) remoteTopic(topic naming.TopicName) (base string, remote bool, err error) {
	if m.Serves(topic) {
		return "", false, nil
	}
	owner, ok := m.coord.Owner(topic.NamespaceName().String(), topic.String())
	if !ok {
		if m.coord.Assigned(topic.NamespaceName().String(), topic.String()) {
			return "", true, fmt.Errorf("%w: the owner of %s is not live", admin.ErrNotReady, topic)
		}
		return "", true, fmt.Errorf("%w: %s", admin.ErrTopicNotFound, topic)
	}
	return webBase(owner), true, nil
}

// ownerForCreate is remoteTopic for an operation that creates the topic: a bundle nobody owns
// is assigned first (as a lookup does), possibly to this broker.
func (m *clusterMember) ownerForCreate(ctx context.Context, topic naming.TopicName) (base string, remote bool, err error) {
	if m.Serves(topic) {
		return "", false, nil
	}
	d, err := m.coord.Lookup(ctx, topic.NamespaceName().String(), topic.String())
	if err != nil {
		if errors.Is(err, cluster.ErrNotReady) {
			return "", true, fmt.Errorf("%w: %v", admin.ErrNotReady, err)
		}
		return "", true, err
	}
	if d.Action == cluster.Connect {
		return "", false, nil
	}
	return webBase(d.Broker), true, nil
}

func webBase(b cluster.BrokerInfo) string {
	base := b.WebURL
	if base == "" {
		base = b.WebURLTLS
	}
	return strings.TrimSuffix(base, "/")
}

// ownerAnswer is another broker's answer to one admin request.
type ownerAnswer struct {
	status int
	header http.Header
	body   []byte
}

// exchange sends one admin request to another broker with the caller's credentials and reads its
// answer, of at most limit bytes (a longer one is an error, never cut short). An error is the
// request's: the broker could not be asked, or its answer is too long.
func (m *clusterMember) exchange(ctx context.Context, method, base, path string, query url.Values, in any, limit int64) (ownerAnswer, error) {
	ctx, cancel := context.WithTimeout(ctx, remoteCallTimeout)
	defer cancel()
	u := base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var reqBody io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return ownerAnswer{}, err
		}
		reqBody = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, reqBody)
	if err != nil {
		return ownerAnswer{}, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if a := admin.ForwardedCredentials(ctx); a != "" {
		req.Header.Set("Authorization", a)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := m.http.Do(req)
	if err != nil {
		return ownerAnswer{}, fmt.Errorf("%w: asking the owner at %s: %v", admin.ErrNotReady, base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return ownerAnswer{}, fmt.Errorf("%w: reading the owner's answer: %v", admin.ErrNotReady, err)
	}
	if int64(len(body)) > limit {
		return ownerAnswer{}, fmt.Errorf("the owner at %s answered %s %s with more than %d bytes", base, method, path, limit)
	}
	return ownerAnswer{status: resp.StatusCode, header: resp.Header, body: body}, nil
}

// callOwner sends one admin request to another broker with the caller's credentials and decodes a
// JSON answer into out (when not nil). A 404 is ErrTopicNotFound; other failures carry the status.
func (m *clusterMember) callOwner(ctx context.Context, method, base, path string, query url.Values, in, out any) error {
	a, err := m.exchange(ctx, method, base, path, query, in, maxRemoteBody)
	if err != nil {
		return err
	}
	switch {
	case a.status == http.StatusNotFound:
		return fmt.Errorf("%w: %s", admin.ErrTopicNotFound, path)
	case a.status == http.StatusConflict && strings.Contains(path, "/subscription/"):
		return fmt.Errorf("%w: %s", admin.ErrSubscriptionExists, path)
	case a.status == http.StatusConflict:
		return fmt.Errorf("%w: %s", admin.ErrTopicExists, path)
	case a.status == http.StatusPreconditionFailed && strings.Contains(path, "/subscription/"):
		return fmt.Errorf("%w: %s", admin.ErrSubscriptionBusy, path)
	case a.status == http.StatusPreconditionFailed:
		return fmt.Errorf("%w: %s", admin.ErrTopicBusy, path)
	case a.status < 200 || a.status > 299:
		return fmt.Errorf("the owner at %s answered %d: %s", base, a.status, strings.TrimSpace(string(a.body)))
	case out != nil && len(a.body) > 0:
		return json.Unmarshal(a.body, out)
	}
	return nil
}

// remoteStats reads a topic's stats from its owner.
func (m *clusterMember) remoteStats(ctx context.Context, base string, topic naming.TopicName, opts adminapi.GetStatsOptions) (adminapi.TopicStats, error) {
	q := url.Values{}
	if opts.ExcludePublishers {
		q.Set("excludePublishers", "true")
	}
	if opts.ExcludeConsumers {
		q.Set("excludeConsumers", "true")
	}
	var st adminapi.TopicStats
	err := m.callOwner(ctx, http.MethodGet, base, "/admin/v2/"+topic.RESTPath()+"/stats", q, nil, &st)
	return st, err
}

// remoteDelete deletes a topic on its owner.
func (m *clusterMember) remoteDelete(ctx context.Context, base string, topic naming.TopicName, force bool) error {
	q := url.Values{}
	if force {
		q.Set("force", "true")
	}
	return m.callOwner(ctx, http.MethodDelete, base, "/admin/v2/"+topic.RESTPath(), q, nil, nil)
}

// remoteCreate creates a topic (a partition) on its owner.
func (m *clusterMember) remoteCreate(ctx context.Context, base string, topic naming.TopicName) error {
	return m.callOwner(ctx, http.MethodPut, base, "/admin/v2/"+topic.RESTPath(), nil, nil, nil)
}

// remoteCreateSubscription creates a subscription on the topic's owner.
func (m *clusterMember) remoteCreateSubscription(ctx context.Context, base string, topic naming.TopicName, sub string,
	start adminapi.MessageID, replicated bool, props map[string]string) error {
	q := url.Values{}
	if replicated {
		q.Set("replicated", "true")
	}
	body := struct {
		adminapi.MessageID
		Properties map[string]string `json:"properties,omitempty"`
	}{start, props}
	return m.callOwner(ctx, http.MethodPut, base, "/admin/v2/"+topic.RESTPath()+"/subscription/"+url.PathEscape(sub), q, body, nil)
}

// remoteDeleteSubscription deletes a subscription on the topic's owner.
func (m *clusterMember) remoteDeleteSubscription(ctx context.Context, base string, topic naming.TopicName, sub string, force bool) error {
	q := url.Values{}
	if force {
		q.Set("force", "true")
	}
	return m.callOwner(ctx, http.MethodDelete, base, "/admin/v2/"+topic.RESTPath()+"/subscription/"+url.PathEscape(sub), q, nil, nil)
}
