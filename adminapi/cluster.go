package adminapi

// ClusterData describes a cluster in the configuration store (`/admin/v2/clusters/{name}`). The name is
// carried by the path, not the body. Meridian uses serviceUrl (admin REST of the remote cluster) and
// brokerServiceUrl (its binary protocol) for geo-replication, or with brokerClientTlsEnabled
// brokerServiceUrlTls and serviceUrlTls, verified with brokerClientTrustCertsFilePath, and
// authenticates with authenticationPlugin and authenticationParameters (docs/security.md).
type ClusterData struct {
	ServiceURL                         string            `json:"serviceUrl,omitempty"`
	ServiceURLTLS                      string            `json:"serviceUrlTls,omitempty"`
	BrokerServiceURL                   string            `json:"brokerServiceUrl,omitempty"`
	BrokerServiceURLTLS                string            `json:"brokerServiceUrlTls,omitempty"`
	ProxyServiceURL                    string            `json:"proxyServiceUrl,omitempty"`
	ProxyProtocol                      string            `json:"proxyProtocol,omitempty"`
	AuthenticationPlugin               string            `json:"authenticationPlugin,omitempty"`
	AuthenticationParameters           string            `json:"authenticationParameters,omitempty"`
	PeerClusterNames                   []string          `json:"peerClusterNames,omitempty"`
	BrokerClientTLSEnabled             bool              `json:"brokerClientTlsEnabled"`
	TLSAllowInsecureConnection         bool              `json:"tlsAllowInsecureConnection"`
	BrokerClientTLSEnabledWithKeyStore bool              `json:"brokerClientTlsEnabledWithKeyStore"`
	BrokerClientTLSTrustStoreType      string            `json:"brokerClientTlsTrustStoreType,omitempty"`
	BrokerClientTLSTrustStore          string            `json:"brokerClientTlsTrustStore,omitempty"`
	BrokerClientTLSTrustStorePassword  string            `json:"brokerClientTlsTrustStorePassword,omitempty"`
	BrokerClientTLSKeyStoreType        string            `json:"brokerClientTlsKeyStoreType,omitempty"`
	BrokerClientTLSKeyStore            string            `json:"brokerClientTlsKeyStore,omitempty"`
	BrokerClientTLSKeyStorePassword    string            `json:"brokerClientTlsKeyStorePassword,omitempty"`
	BrokerClientTrustCertsFilePath     string            `json:"brokerClientTrustCertsFilePath,omitempty"`
	BrokerClientKeyFilePath            string            `json:"brokerClientKeyFilePath,omitempty"`
	BrokerClientCertificateFilePath    string            `json:"brokerClientCertificateFilePath,omitempty"`
	BrokerClientSslFactoryPlugin       string            `json:"brokerClientSslFactoryPlugin,omitempty"`
	BrokerClientSslFactoryPluginParams string            `json:"brokerClientSslFactoryPluginParams,omitempty"`
	ListenerName                       string            `json:"listenerName,omitempty"`
	Migrated                           bool              `json:"migrated"`
	MigratedClusterURL                 *ClusterURL       `json:"migratedClusterUrl,omitempty"`
	Properties                         map[string]string `json:"properties,omitempty"`
	// ReplicatorRoles is Meridian's: the roles allowed to publish entries replicated from this
	// cluster (besides superusers). Set through /admin/v2/clusters/{cluster}/replicatorRoles; an
	// update of the cluster without it keeps it.
	ReplicatorRoles []string            `json:"replicatorRoles,omitempty"`
	FailureDomains  map[string][]string `json:"-"`
}

// ClusterURL is the set of URLs of a cluster (used for blue-green migration targets).
type ClusterURL struct {
	ServiceURL          string `json:"serviceUrl,omitempty"`
	ServiceURLTLS       string `json:"serviceUrlTls,omitempty"`
	BrokerServiceURL    string `json:"brokerServiceUrl,omitempty"`
	BrokerServiceURLTLS string `json:"brokerServiceUrlTls,omitempty"`
}

// TenantInfo is a tenant (`/admin/v2/tenants/{tenant}`): the roles that administer it and the clusters
// its namespaces may use (and may replicate between).
type TenantInfo struct {
	AdminRoles      []string `json:"adminRoles"`
	AllowedClusters []string `json:"allowedClusters"`
}

// LookupData answers `/lookup/v2/topic/...`: where the topic is served.
type LookupData struct {
	BrokerURL    string `json:"brokerUrl"`
	BrokerURLTLS string `json:"brokerUrlTls,omitempty"`
	HTTPURL      string `json:"httpUrl"`
	HTTPURLTLS   string `json:"httpUrlTls,omitempty"`
	// NativeURL is Pulsar's deprecated duplicate of brokerUrl, still read by some clients.
	NativeURL string `json:"nativeUrl,omitempty"`
}

// BrokerInfo is one active broker (`/admin/v2/brokers/leaderBroker`).
type BrokerInfo struct {
	BrokerID   string `json:"brokerId"`
	ServiceURL string `json:"serviceUrl"`
}

// BuildInfo is how a broker (or a tool) was built: Meridian's answer to
// `GET /admin/v2/brokers/build-info`. Pulsar's `GET /admin/v2/brokers/version` answers Version alone,
// as plain text.
type BuildInfo struct {
	// Module is the main module's path.
	Module string `json:"module,omitempty"`
	// Version is the main module's version: a release tag, a pseudo-version naming the commit, or
	// "(devel)".
	Version string `json:"version"`
	// Commit is the VCS revision the binary was built from, CommitTime its time (RFC 3339), and
	// Modified whether the work tree had uncommitted changes.
	Commit     string `json:"commit,omitempty"`
	CommitTime string `json:"commitTime,omitempty"`
	Modified   bool   `json:"modified,omitempty"`
	// GoVersion is the Go toolchain that built it.
	GoVersion string `json:"goVersion,omitempty"`
}
