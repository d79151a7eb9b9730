package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/admin"
	"github.com/meridian-mq/meridian/internal/naming"
)

// A partitioned topic's admin calls (stats, deletion) are answered by whichever broker is asked,
// but each partition lives on its bundle's owner: the broker asks the owners of the partitions it
// does not serve through their admin API, with the caller's credentials (docs/cluster.md).

// remoteCallTimeout bounds one call to another broker of the cluster.
const remoteCallTimeout = 30 * time.Second

// maxRemoteBody bounds a peer's answer.
const maxRemoteBody = 16 << 20

// remotePartition reports whether topic is a partition another live broker owns, and that
// broker's web base URL. A partition whose bundle nobody owns yet was never created.
func (m *clusterMember) remotePartition(topic naming.TopicName) (base string, remote bool, err error) {
	if !topic.IsPartition() || m.Serves(topic) {
		return "", false, nil
	}
	owner, ok := m.coord.Owner(topic.NamespaceName().String(), topic.String())
	if !ok {
		if m.coord.Assigned(topic.NamespaceName().String(), topic.String()) {
			return "", true, fmt.Errorf("%w: the owner of %s is not live", admin.ErrNotReady, topic)
		}
		return "", true, fmt.Errorf("%w: %s", admin.ErrTopicNotFound, topic)
	}
	base = owner.WebURL
	if base == "" {
		base = owner.WebURLTLS
	}
	return strings.TrimSuffix(base, "/"), true, nil
}

// callOwner sends one admin request to another broker with the caller's credentials and decodes a
// JSON answer into out (when not nil). A 404 is ErrTopicNotFound; other failures carry the status.
func (m *clusterMember) callOwner(ctx context.Context, method, base, path string, query url.Values, out any) error {
	ctx, cancel := context.WithTimeout(ctx, remoteCallTimeout)
	defer cancel()
	u := base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return err
	}
	if a := admin.ForwardedCredentials(ctx); a != "" {
		req.Header.Set("Authorization", a)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := m.http.Do(req)
	if err != nil {
		return fmt.Errorf("%w: asking the owner at %s: %v", admin.ErrNotReady, base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxRemoteBody))
	if err != nil {
		return fmt.Errorf("%w: reading the owner's answer: %v", admin.ErrNotReady, err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%w: %s", admin.ErrTopicNotFound, path)
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return fmt.Errorf("the owner at %s answered %d: %s", base, resp.StatusCode, strings.TrimSpace(string(body)))
	case out != nil && len(body) > 0:
		return json.Unmarshal(body, out)
	}
	return nil
}

// remoteStats reads a partition's stats from its owner.
func (m *clusterMember) remoteStats(ctx context.Context, base string, topic naming.TopicName, opts adminapi.GetStatsOptions) (adminapi.TopicStats, error) {
	q := url.Values{}
	if opts.ExcludePublishers {
		q.Set("excludePublishers", "true")
	}
	if opts.ExcludeConsumers {
		q.Set("excludeConsumers", "true")
	}
	var st adminapi.TopicStats
	err := m.callOwner(ctx, http.MethodGet, base, "/admin/v2/"+topic.RESTPath()+"/stats", q, &st)
	return st, err
}

// remoteDelete deletes a partition on its owner.
func (m *clusterMember) remoteDelete(ctx context.Context, base string, topic naming.TopicName, force bool) error {
	q := url.Values{}
	if force {
		q.Set("force", "true")
	}
	return m.callOwner(ctx, http.MethodDelete, base, "/admin/v2/"+topic.RESTPath(), q, nil)
}
