package catalog

import (
	"net/url"
	"strings"

	"github.com/meridian-mq/meridian/internal/naming"
)

// Key layout in the configuration store (documented in docs/admin.md and the package doc). Values
// are JSON documents with Pulsar's field names (adminapi types).
const (
	prefixRoot          = "/admin/"
	prefixClusters      = "/admin/clusters/"
	prefixPolicies      = "/admin/policies/"
	prefixPartitioned   = "/admin/partitioned-topics/"
	prefixTopicPolicies = "/admin/topic-policies/"
	keyDynamicConfig    = "/admin/configuration"
)

func clusterKey(name string) string  { return prefixClusters + name }
func tenantKey(tenant string) string { return prefixPolicies + tenant }
func namespaceKey(ns naming.NamespaceName) string {
	return prefixPolicies + ns.Tenant + "/" + ns.Namespace
}

// topicSuffix is "tenant/ns/domain/escapedLocal"; the local name is path-escaped because it may hold
// characters that are not valid in keys (and so that a key segment never contains '/').
func topicSuffix(t naming.TopicName) string {
	return t.Tenant + "/" + t.Namespace + "/" + string(t.Domain) + "/" + url.PathEscape(t.Local)
}

func partitionedKey(t naming.TopicName) string   { return prefixPartitioned + topicSuffix(t.Base()) }
func topicPoliciesKey(t naming.TopicName) string { return prefixTopicPolicies + topicSuffix(t.Base()) }

// keyKind classifies a store key; name is the cluster, tenant, "tenant/ns" or full topic name.
type keyKind int

const (
	keyUnknown keyKind = iota
	keyCluster
	keyTenant
	keyNamespace
	keyPartitioned
	keyTopicPolicies
	keyDynamic
)

func parseKey(key string) (keyKind, string) {
	switch {
	case key == keyDynamicConfig:
		return keyDynamic, ""
	case strings.HasPrefix(key, prefixClusters):
		name := key[len(prefixClusters):]
		if name == "" || strings.Contains(name, "/") {
			return keyUnknown, ""
		}
		return keyCluster, name
	case strings.HasPrefix(key, prefixPolicies):
		rest := key[len(prefixPolicies):]
		switch strings.Count(rest, "/") {
		case 0:
			return keyTenant, rest
		case 1:
			return keyNamespace, rest
		}
		return keyUnknown, ""
	case strings.HasPrefix(key, prefixPartitioned):
		if t, ok := topicFromSuffix(key[len(prefixPartitioned):]); ok {
			return keyPartitioned, t
		}
	case strings.HasPrefix(key, prefixTopicPolicies):
		if t, ok := topicFromSuffix(key[len(prefixTopicPolicies):]); ok {
			return keyTopicPolicies, t
		}
	}
	return keyUnknown, ""
}

func topicFromSuffix(s string) (string, bool) {
	parts := strings.Split(s, "/")
	if len(parts) != 4 {
		return "", false
	}
	local, err := url.PathUnescape(parts[3])
	if err != nil {
		return "", false
	}
	return parts[2] + "://" + parts[0] + "/" + parts[1] + "/" + local, true
}
