package config

import "strings"

// Pulsar's keys that Meridian knows and does not act on: settings of parts Pulsar has and Meridian
// does not (ZooKeeper, BookKeeper, the load balancer, transactions) and tuning knobs whose value
// Meridian has fixed. None of them can make the broker more open than its file says: each is
// listed here only after checking that it grants or secures nothing Meridian has. A file may name
// them (Pulsar's own broker.conf and standalone.conf do); they are logged once as known and
// ignored. A key neither here nor in Keys is unknown: logged too, with a warning that it may be a
// misspelling.

// ignoredFamilies are prefixes of Pulsar keys of whole subsystems Meridian does not have.
var ignoredFamilies = []struct{ prefix, reason string }{
	{"zookeeper", "Meridian keeps metadata in its data dir or etcd (--config-store), not ZooKeeper"},
	{"zooKeeper", "Meridian keeps metadata in its data dir or etcd (--config-store), not ZooKeeper"},
	{"globalZookeeper", "Meridian keeps metadata in its data dir or etcd (--config-store), not ZooKeeper"},
	{"configurationStore", "the configuration store is --config-store"},
	{"metadataStore", "the local metadata store lives in the data dir"},
	{"bookkeeper", "Meridian stores ledgers on local disk, not BookKeeper: there is no BookKeeper client to tune or authenticate"},
	{"managedLedger", "Meridian's storage is not Pulsar's managed ledger (docs/storage.md)"},
	{"loadBalancer", "bundles go to the least-loaded broker on first lookup; the shedder's rule is fixed (docs/cluster.md): no bundle splitting, no other load measures"},
	{"transaction", "transactions are not implemented"},
	{"functions", "Pulsar Functions are not part of Meridian"},
}

// ignoredKeys are single Pulsar keys Meridian knows and does not act on, with why.
var ignoredKeys = map[string]string{
	"backlogQuotaCheckEnabled":                     "backlog quotas are namespace and topic policies, always enforced",
	"backlogQuotaCheckIntervalInSeconds":           "fixed at Pulsar's default: quotas are enforced every 5 seconds",
	"backlogQuotaDefaultLimitGB":                   "no broker-wide default backlog quota: set it per namespace or topic",
	"backlogQuotaDefaultLimitBytes":                "no broker-wide default backlog quota: set it per namespace or topic",
	"backlogQuotaDefaultRetentionPolicy":           "no broker-wide default backlog quota: set it per namespace or topic",
	"brokerDeleteInactiveTopicsEnabled":            "inactive topics are not deleted automatically",
	"brokerDeleteInactiveTopicsFrequencySeconds":   "inactive topics are not deleted automatically",
	"brokerDeleteInactiveTopicsMode":               "inactive topics are not deleted automatically",
	"brokerServicePurgeInactiveFrequencyInSeconds": "inactive topics are not deleted automatically",
	"messageExpiryCheckIntervalInMinutes":          "message TTL policies are applied every minute",
	"clientLibraryVersionCheckEnabled":             "client versions are reported in stats, never checked",
	"clientLibraryVersionCheckAllowUnversioned":    "client versions are reported in stats, never checked",
	"statusFilePath":                               "readiness is /admin/v2/brokers/ready, not a status file",
	"maxUnackedMessagesPerConsumer":                "fixed at Pulsar's default, 50,000",
	"maxUnackedMessagesPerSubscription":            "fixed at Pulsar's default, 200,000",
	"topicLevelPoliciesEnabled":                    "topic policies are always on",
	"systemTopicEnabled":                           "topic policies are kept in the metadata store, not in system topics",
	"systemTopicSchemaCompatibilityStrategy":       "no system topics",
	"replicationMetricsEnabled":                    "replication metrics are always on",
	"replicationConnectionsPerBroker":              "one connection per remote cluster",
	"replicationProducerQueueSize":                 "the replicators' window is --replication-memory-bytes",
	"defaultRetentionTimeInMinutes":                "no broker-wide default retention: set it per namespace or topic",
	"defaultRetentionSizeInMB":                     "no broker-wide default retention: set it per namespace or topic",
	"allowAutoSubscriptionCreation":                "subscriptions are created on first SUBSCRIBE, as with Pulsar's default (true)",
	"acknowledgmentAtBatchIndexLevelEnabled":       "batch-index acknowledgements are always accepted",
	"subscriptionKeySharedUseConsistentHashing":    "Key_Shared uses Pulsar's auto-split hash ranges (this key's false)",
}

// ignoredReason returns why Meridian ignores a Pulsar key it knows, or "" for an unknown key.
func ignoredReason(key string) string {
	if r, ok := ignoredKeys[key]; ok {
		return r
	}
	for _, f := range ignoredFamilies {
		if strings.HasPrefix(key, f.prefix) {
			return f.reason
		}
	}
	return ""
}
