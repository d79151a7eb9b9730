package config

import (
	"errors"
	"fmt"
	"time"
)

// Settings is everything `meridian standalone` can be told, typed but not yet checked against the
// broker's rules (internal/node validates the options built from it). The caller fills in the
// defaults before applying any source: cmd/meridian starts from node.DefaultOptions and
// DefaultTLS/DefaultAuth/DefaultBrokerClient.
type Settings struct {
	Cluster string
	DataDir string
	// The listeners, host:port; empty turns a listener off. In a configuration file they are set by
	// Pulsar's bindAddress and *Port keys (see resolveListeners).
	BrokerAddr, WebAddr, BrokerTLSAddr, WebTLSAddr string
	AdvertisedAddress                              string
	ConfigStore                                    string
	// MetadataStore is the cluster-local store shared by the cluster's brokers; BrokerID names
	// this broker there; Brokers > 1 runs that many brokers in one process.
	MetadataStore, BrokerID string
	Brokers                 int
	ReplicationStartAt      string
	MaxMessageSize          int
	// MaxPendingPublishRequests and MaxPendingPublishBytes bound one connection's publishes in
	// flight (bytes 0: only the broker-wide budget); MaxOutboundBytes what is queued to one client.
	MaxPendingPublishRequests, MaxPendingPublishBytes, MaxOutboundBytes int
	// MaxConnectionsPerIP bounds binary-protocol connections from one source address (0: off).
	MaxConnectionsPerIP                int
	Fsync                              string
	FsyncPipeline                      int
	DirectWriteBytes, BypassCacheBytes int
	ReplicationMemoryBytes             int
	// EntryCacheMB bounds the broker-wide entry cache (Pulsar's managedLedgerCacheSizeMB).
	EntryCacheMB                       int
	Dedup, AutoTopicCreation           bool
	InsecureAllowPlaintext             bool
	Clusters                           []string
	KeepAliveInterval, ShutdownTimeout time.Duration
	// LoadShedding (Pulsar's loadBalancerEnabled and loadBalancerSheddingEnabled, both true) and
	// LoadSheddingInterval: a broker of a cluster that serves too many bundles hands them over.
	// HandOverTimeout: how long a stopping broker of a cluster hands its bundles over (0: it does
	// not).
	LoadBalancer, LoadShedding            bool
	LoadSheddingInterval, HandOverTimeout time.Duration
	// TopicLevelMetrics: per-topic series on /metrics (Pulsar's exposeTopicLevelMetricsInPrometheus).
	TopicLevelMetrics bool
	// ReplicationStallTimeout: a replicator with a backlog and no progress for this long is stalled.
	ReplicationStallTimeout time.Duration
	// ConsoleHistoryBytes bounds the replication console's link history (0: no bound).
	ConsoleHistoryBytes int
	// LogFormat is the process's log format: text or json.
	LogFormat string

	TLS          TLS
	Auth         Auth
	BrokerClient BrokerClient

	// Deprecated or unsupported Pulsar switches, kept to refuse values Meridian cannot honour.
	tlsEnabled             bool
	tlsEnabledWithKeyStore bool
	autoTopicCreationType  string
	tls13Only              bool // tlsCiphers named only TLS 1.3 suites

	// listen collects bindAddress and the port keys of a file until resolveListeners.
	listen listenKeys
}

// TLS is the listeners' TLS identity and policy (Pulsar's tls* keys).
type TLS struct {
	// CertificateFile and KeyFile are the PEM certificate chain and private key the TLS listeners
	// present; re-read when they change (RefreshInterval).
	CertificateFile, KeyFile string
	// TrustCertsFile is the PEM CA bundle client certificates are verified against.
	TrustCertsFile string
	// RequireTrustedClientCert refuses TLS clients without a certificate that TrustCertsFile
	// verifies (mutual TLS).
	RequireTrustedClientCert bool
	// AllowInsecureConnection accepts client certificates that do not verify: the connection is
	// allowed, the certificate proves nothing (Pulsar's meaning). Contradicts
	// RequireTrustedClientCert.
	AllowInsecureConnection bool
	// MinVersion and MaxVersion (crypto/tls constants) come from tlsProtocols; TLS 1.2 is the floor.
	MinVersion, MaxVersion uint16
	// CipherSuites for TLS 1.2 (crypto/tls ids, from tlsCiphers); nil means Go's secure default.
	CipherSuites []uint16
	// RefreshInterval is how often the certificate, key and CA files are checked for new content
	// (tlsCertRefreshCheckDurationSec); 0 checks on every new connection.
	RefreshInterval time.Duration
}

// Pulsar's and Meridian's TLS defaults.
const (
	DefaultTLSRefreshInterval       = 300 * time.Second
	DefaultAuthRefreshCheckInterval = 60 * time.Second
	DefaultTokenAuthClaim           = "sub"
	DefaultTokenPublicAlg           = "RS256"
)

// DefaultTLS is TLS with its defaults (TLS 1.2 to 1.3, Go's secure cipher suites).
func DefaultTLS() TLS {
	return TLS{MinVersion: tlsVersion12, MaxVersion: tlsVersion13, RefreshInterval: DefaultTLSRefreshInterval}
}

// AuthProvider is an authentication provider Meridian knows, by Pulsar's class name.
type AuthProvider string

// The providers of Pulsar that Meridian implements or will implement (issue-level scope: TLS
// client certificates, tokens, basic).
const (
	AuthProviderTLS   AuthProvider = "org.apache.pulsar.broker.authentication.AuthenticationProviderTls"
	AuthProviderToken AuthProvider = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"
	AuthProviderBasic AuthProvider = "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic"
)

// PulsarAuthorizationProvider is the only authorization model Meridian has: Pulsar's default.
const PulsarAuthorizationProvider = "org.apache.pulsar.broker.authorization.PulsarAuthorizationProvider"

// Auth is authentication and authorization (Pulsar's keys of the same names).
type Auth struct {
	AuthenticationEnabled bool
	Providers             []AuthProvider
	AuthorizationEnabled  bool
	SuperUserRoles        []string
	AnonymousUserRole     string
	// TokenSecretKey (HS*) and TokenPublicKey (RS*/ES*) verify JWTs.
	TokenSecretKey, TokenPublicKey KeySource
	TokenPublicAlg                 string
	TokenAuthClaim                 string
	// TokenAudienceClaim and TokenAudience: when TokenAudience is set, a token must name it in
	// that claim ("aud" by default).
	TokenAudienceClaim, TokenAudience string
	// BasicAuthConf is the htpasswd file (or data) of the basic provider.
	BasicAuthConf               KeySource
	AuthenticateMetricsEndpoint bool
	// RefreshCheckInterval: how often connections' credentials are checked for expiry.
	RefreshCheckInterval time.Duration
}

// DefaultAuth is Auth with Pulsar's defaults: everything off.
func DefaultAuth() Auth {
	return Auth{TokenPublicAlg: DefaultTokenPublicAlg, TokenAuthClaim: DefaultTokenAuthClaim, RefreshCheckInterval: DefaultAuthRefreshCheckInterval}
}

// BrokerClient is how this broker connects to other brokers (replication links): Pulsar's
// brokerClient* keys. They are defaults: a remote cluster's data that enables TLS or names an
// authentication plugin overrides them (internal/replication, LinkDefaults).
type BrokerClient struct {
	TLSEnabled                                     bool
	TrustCertsFile, CertificateFile, KeyFile       string
	AuthenticationPlugin, AuthenticationParameters string
	// HostnameVerification is Pulsar's tlsHostnameVerificationEnabled (default false there);
	// Meridian's outgoing links verify the host name whatever it says.
	HostnameVerification   bool
	tlsEnabledWithKeyStore bool
}

// DefaultBrokerClient is BrokerClient with Pulsar's defaults (plaintext, no credentials).
func DefaultBrokerClient() BrokerClient { return BrokerClient{} }

// Validate refuses combinations of keys Meridian cannot honour, naming the keys. What the broker
// can do with each value (ports, sizes, files) is checked when the node's options are validated.
func (s *Settings) Validate() error {
	var errs []error
	if s.tlsEnabled && s.BrokerTLSAddr == "" && s.WebTLSAddr == "" {
		errs = append(errs, errors.New("tlsEnabled=true but no TLS listener is configured: set brokerServicePortTls and/or webServicePortTls (or --broker-tls-addr/--web-tls-addr)"))
	}
	if s.tlsEnabledWithKeyStore {
		errs = append(errs, errors.New("tlsEnabledWithKeyStore=true: key stores are not supported by this build; use PEM files (tlsCertificateFilePath, tlsKeyFilePath, tlsTrustCertsFilePath)"))
	}
	if s.BrokerClient.tlsEnabledWithKeyStore {
		errs = append(errs, errors.New("brokerClientTlsEnabledWithKeyStore=true: key stores are not supported by this build; use PEM files (brokerClientTrustCertsFilePath, brokerClientCertificateFilePath, brokerClientKeyFilePath)"))
	}
	if s.autoTopicCreationType != "" && s.autoTopicCreationType != "non-partitioned" {
		errs = append(errs, fmt.Errorf("allowAutoTopicCreationType=%s: this build creates non-partitioned topics on first use; set the namespace's autoTopicCreationOverride for partitioned ones", s.autoTopicCreationType))
	}
	if s.TLS.RequireTrustedClientCert && s.TLS.AllowInsecureConnection {
		errs = append(errs, errors.New("tlsRequireTrustedClientCertOnConnect=true contradicts tlsAllowInsecureConnection=true: a required client certificate must be verified"))
	}
	return errors.Join(errs...)
}
