package config

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// Key is one setting: its configuration-file key, its flag, or both.
type Key struct {
	// Name is the configuration-file key: Pulsar's name where Pulsar has the setting, else the
	// flag's name. Empty for settings that are flags only (the listener addresses, which a file
	// sets with bindAddress and the port keys).
	Name string
	// Flag is the `meridian standalone` flag (and MERIDIAN_STANDALONE_<FLAG> variable); empty for
	// file-only keys.
	Flag string
	// Usage is the flag's help text and the meaning column of docs/operations.md.
	Usage string
	// Bool flags need no value (--dedup means --dedup=true).
	Bool bool
	// List values are comma-separated.
	List bool
	// Secret values are never shown in errors or logs.
	Secret bool
	// emptyMeansOff: in a file, "key=" turns the setting off (the port keys); for every other key
	// an empty value in a file leaves the default.
	emptyMeansOff bool

	set func(*Settings, string) error
	get func(*Settings) string
}

// Get returns the setting's current value as text (secrets redacted).
func (k Key) Get(s *Settings) string {
	if k.get == nil {
		return ""
	}
	return k.get(s)
}

// EnvName is the environment variable of a flag: MERIDIAN_STANDALONE_DATA_DIR for --data-dir.
func EnvName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// Environment variable prefixes (see the package comment for their precedence).
const (
	EnvPrefix       = "MERIDIAN_STANDALONE_"
	PulsarEnvPrefix = "PULSAR_PREFIX_"
)

// Keys returns every setting, in the order of docs/operations.md.
func Keys() []Key { return keys }

var (
	keys      []Key
	byName    = map[string]*Key{}
	byFlag    = map[string]*Key{}
	listeners = [numListeners]struct {
		port string
		addr func(*Settings) *string
	}{
		{"brokerServicePort", func(s *Settings) *string { return &s.BrokerAddr }},
		{"webServicePort", func(s *Settings) *string { return &s.WebAddr }},
		{"brokerServicePortTls", func(s *Settings) *string { return &s.BrokerTLSAddr }},
		{"webServicePortTls", func(s *Settings) *string { return &s.WebTLSAddr }},
	}
)

func init() {
	keys = []Key{
		strKey("clusterName", "cluster", "this cluster's name; the data dir is bound to it", func(s *Settings) *string { return &s.Cluster }),
		strKey("data-dir", "data-dir", "storage and local metadata; bound to its cluster", func(s *Settings) *string { return &s.DataDir }),
		{Name: "bindAddress", Usage: "host every listener binds to (Pulsar's default is 0.0.0.0; Meridian's is 127.0.0.1)",
			set: func(s *Settings, v string) error {
				if strings.ContainsAny(v, " /") {
					return fmt.Errorf("%q is not a host or IP address", v)
				}
				s.listen.bind = &v
				return nil
			}, get: func(s *Settings) string { return hostOf(s.BrokerAddr) }},
		portKey(0, "Pulsar binary protocol port; empty: no plaintext binary listener"),
		portKey(2, "Pulsar binary protocol over TLS (pulsar+ssl://) port; empty: none"),
		portKey(1, "admin REST and /metrics port; empty: no plaintext web listener"),
		portKey(3, "admin REST and /metrics over TLS (https://) port; empty: none"),
		strKey("", "broker-addr", "Pulsar binary protocol listener (host:port; empty: none)", func(s *Settings) *string { return &s.BrokerAddr }),
		strKey("", "broker-tls-addr", "Pulsar binary protocol over TLS listener, pulsar+ssl:// (host:port; empty: none)", func(s *Settings) *string { return &s.BrokerTLSAddr }),
		strKey("", "web-addr", "admin REST and /metrics listener (host:port; empty: none)", func(s *Settings) *string { return &s.WebAddr }),
		strKey("", "web-tls-addr", "admin REST and /metrics over TLS listener, https:// (host:port; empty: none)", func(s *Settings) *string { return &s.WebTLSAddr }),
		strKey("advertisedAddress", "advertised-address", "host put into the cluster's URLs and LOOKUP answers (default: the listener's host)", func(s *Settings) *string { return &s.AdvertisedAddress }),
		strKey("config-store", "config-store", "configuration store shared with other clusters: etcd://h1:2379,h2:2379[/prefix] (default: the local store)", func(s *Settings) *string { return &s.ConfigStore }),
		strKey("metadata-store", "metadata-store", "cluster-local metadata store shared by the brokers of this cluster: etcd://h1:2379,h2:2379[/prefix] (default: this broker's own file; a cluster of one broker)", func(s *Settings) *string { return &s.MetadataStore }),
		strKey("broker-id", "broker-id", "this broker's name in its cluster (default: the id recorded in the data dir, or the advertised binary address)", func(s *Settings) *string { return &s.BrokerID }),
		intKey("brokers", "brokers", "run a cluster of this many brokers in one process, broker i on 127.0.0.i with the same ports, for trying scale-out on one machine (1 = one broker)", func(s *Settings) *int { return &s.Brokers }),
		strKey("replication-start-at", "replication-start-at", "where a new replicator starts on a topic that already has data: earliest|latest", func(s *Settings) *string { return &s.ReplicationStartAt }),
		intKey("brokerMaxConnectionsPerIp", "max-connections-per-ip", "binary-protocol connections one source address may have open (0 = no limit)", func(s *Settings) *int { return &s.MaxConnectionsPerIP }),
		intKey("maxPendingPublishRequestsPerConnection", "max-pending-publish-requests", "publishes one connection may have in flight (read, not yet stored) before it stops being read", func(s *Settings) *int { return &s.MaxPendingPublishRequests }),
		intKey("max-pending-publish-bytes", "max-pending-publish-bytes", "bytes of publishes one connection may have in flight before it stops being read (0 = only the broker-wide budget)", func(s *Settings) *int { return &s.MaxPendingPublishBytes }),
		intKey("max-outbound-bytes", "max-outbound-bytes", "bytes queued to one client before its connection stops being read; at 4x the connection is closed", func(s *Settings) *int { return &s.MaxOutboundBytes }),
		intKey("maxMessageSize", "max-message-size", "largest message in bytes; advertised to clients and enforced", func(s *Settings) *int { return &s.MaxMessageSize }),
		strKey("fsync", "fsync", "always: acknowledge after fsync; interval: acknowledge before fsync (a crash can lose acknowledged messages)", func(s *Settings) *string { return &s.Fsync }),
		intKey("fsync-pipeline", "fsync-pipeline", "with --fsync always: group commits whose fsync may run at once (1 = one at a time)", func(s *Settings) *int { return &s.FsyncPipeline }),
		intKey("direct-write-bytes", "direct-write-bytes", "with --fsync always: a topic's share of one group commit from which it is written once, straight to its segment file, instead of journal + segment (0 = never)", func(s *Settings) *int { return &s.DirectWriteBytes }),
		intKey("bypass-cache-bytes", "bypass-cache-bytes", "segment writes and reads of at least this many bytes bypass the page cache (O_DIRECT, where the file system allows it; 0 = never)", func(s *Settings) *int { return &s.BypassCacheBytes }),
		intKey("managedLedgerCacheSizeMB", "entry-cache-mb", "MiB of recently written entries kept in memory for consumers and replicators reading the tail (0 = no cache)", func(s *Settings) *int { return &s.EntryCacheMB }),
		intKey("replication-memory-bytes", "replication-memory-bytes", "bytes of entries all replicators may hold at once, read and not yet acknowledged by their remote; a catch-up read that does not fit waits (0 = no bound)", func(s *Settings) *int { return &s.ReplicationMemoryBytes }),
		boolKey("brokerDeduplicationEnabled", "dedup", "broker-wide default for producer deduplication (the namespace policy overrides)", func(s *Settings) *bool { return &s.Dedup }),
		boolKey("allowAutoTopicCreation", "auto-topic-creation", "create non-partitioned topics on first use (the namespace policy overrides)", func(s *Settings) *bool { return &s.AutoTopicCreation }),
		strKey("allowAutoTopicCreationType", "", "only non-partitioned (Pulsar's default) is supported", func(s *Settings) *string { return &s.autoTopicCreationType }),
		boolKey("insecure-allow-plaintext", "insecure-allow-plaintext", "allow plaintext listeners on non-loopback addresses without authentication", func(s *Settings) *bool { return &s.InsecureAllowPlaintext }),
		listKey("clusters", "clusters", "run these clusters in one process, replicating public/default full mesh (a,b,c)", func(s *Settings) *[]string { return &s.Clusters }),
		{Name: "log-format", Flag: "log-format", Usage: "log lines as text (key=value) or json (one object per line)",
			set: func(s *Settings, v string) error {
				if v != "text" && v != "json" {
					return fmt.Errorf("%q: want text or json", v)
				}
				s.LogFormat = v
				return nil
			}, get: func(s *Settings) string { return s.LogFormat }},
		durationKey("keepAliveIntervalSeconds", "", time.Second, "the broker pings a connection idle this long and closes it after twice this long", func(s *Settings) *time.Duration { return &s.KeepAliveInterval }),
		durationKey("brokerShutdownTimeoutMs", "", time.Millisecond, "bound of a graceful shutdown", func(s *Settings) *time.Duration { return &s.ShutdownTimeout }),
		boolKey("loadBalancerEnabled", "", "false: bundles of a cluster of several brokers move only when unloaded or when their broker stops (no load shedding)", func(s *Settings) *bool { return &s.LoadBalancer }),
		boolKey("loadBalancerSheddingEnabled", "load-shedding", "a broker of a cluster that serves two bundles more than the least-loaded broker hands one over to it", func(s *Settings) *bool { return &s.LoadShedding }),
		durationKey("loadBalancerSheddingIntervalMinutes", "", time.Minute, "how often a broker checks whether to shed a bundle", func(s *Settings) *time.Duration { return &s.LoadSheddingInterval }),
		durationKey("load-shedding-interval", "load-shedding-interval", time.Second, "loadBalancerSheddingIntervalMinutes in seconds", func(s *Settings) *time.Duration { return &s.LoadSheddingInterval }),
		durationKey("handover-timeout", "handover-timeout", time.Second, "seconds a stopping broker of a cluster spends handing its bundles over to the other brokers (0: they wait for it to come back)", func(s *Settings) *time.Duration { return &s.HandOverTimeout }),
		boolKey("exposeTopicLevelMetricsInPrometheus", "expose-topic-level-metrics", "per-topic (and per-subscription) series on /metrics; false: namespace aggregates only, for brokers with many topics", func(s *Settings) *bool { return &s.TopicLevelMetrics }),
		intKey("console-history-bytes", "console-history-bytes", "memory for the replication console's link history, 15 minutes per active outbound link (0 = no bound)", func(s *Settings) *int { return &s.ConsoleHistoryBytes }),
		durationKey("replication-stall-timeout", "replication-stall-timeout", time.Second, "seconds a replicator with a backlog may make no progress before it is reported stalled (topic stats, meridian_replication_stalled)", func(s *Settings) *time.Duration { return &s.ReplicationStallTimeout }),

		// TLS of the listeners.
		strKey("tlsCertificateFilePath", "tls-cert-file", "PEM certificate chain the TLS listeners present (re-read when it changes)", func(s *Settings) *string { return &s.TLS.CertificateFile }),
		strKey("tlsKeyFilePath", "tls-key-file", "PEM private key of --tls-cert-file (re-read when it changes)", func(s *Settings) *string { return &s.TLS.KeyFile }),
		strKey("tlsTrustCertsFilePath", "tls-trust-certs-file", "PEM CA certificates client certificates are verified against", func(s *Settings) *string { return &s.TLS.TrustCertsFile }),
		boolKey("tlsRequireTrustedClientCertOnConnect", "tls-require-trusted-client-cert", "TLS clients must present a certificate --tls-trust-certs-file verifies (mutual TLS)", func(s *Settings) *bool { return &s.TLS.RequireTrustedClientCert }),
		boolKey("tlsAllowInsecureConnection", "", "accept TLS client certificates that do not verify (they then prove nothing)", func(s *Settings) *bool { return &s.TLS.AllowInsecureConnection }),
		{Name: "tlsProtocols", List: true, Usage: "TLS versions the listeners accept: TLSv1.3, TLSv1.2 (TLS 1.2 is the minimum)",
			set: setTLSProtocols, get: func(s *Settings) string { return protocolsText(s.TLS.MinVersion, s.TLS.MaxVersion) }},
		{Name: "tlsCiphers", List: true, Usage: "TLS 1.2 cipher suites (IANA names, e.g. TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256); empty: Go's secure default",
			set: setTLSCiphers, get: func(s *Settings) string { return ciphersText(s.TLS.CipherSuites) }},
		durationKey("tlsCertRefreshCheckDurationSec", "", time.Second, "how often the certificate, key and CA files are checked for new content (0: on every new connection)", func(s *Settings) *time.Duration { return &s.TLS.RefreshInterval }),
		boolKey("tlsEnabled", "", "deprecated in Pulsar: the TLS ports decide; true without a TLS port is refused", func(s *Settings) *bool { return &s.tlsEnabled }),
		boolKey("tlsEnabledWithKeyStore", "", "key stores are not supported: true is refused", func(s *Settings) *bool { return &s.tlsEnabledWithKeyStore }),

		// Authentication and authorization.
		boolKey("authenticationEnabled", "", "authenticate every CONNECT and HTTP request with authenticationProviders", func(s *Settings) *bool { return &s.Auth.AuthenticationEnabled }),
		{Name: "authenticationProviders", List: true, Usage: "Pulsar provider classes: AuthenticationProviderToken, AuthenticationProviderTls, AuthenticationProviderBasic; no effect while authenticationEnabled is off",
			set: setProviders, get: func(s *Settings) string { return joinProviders(s.Auth.Providers) }},
		boolKey("authorizationEnabled", "", "check permissions: superusers, tenant admins, namespace and topic grants (needs authenticationEnabled)", func(s *Settings) *bool { return &s.Auth.AuthorizationEnabled }),
		{Name: "authorizationProvider", Usage: "only " + PulsarAuthorizationProvider,
			set: func(_ *Settings, v string) error {
				if v != PulsarAuthorizationProvider {
					return fmt.Errorf("%q is not supported by this build (only %s)", v, PulsarAuthorizationProvider)
				}
				return nil
			}, get: func(*Settings) string { return PulsarAuthorizationProvider }},
		listKey("superUserRoles", "", "roles allowed everything", func(s *Settings) *[]string { return &s.Auth.SuperUserRoles }),
		strKey("anonymousUserRole", "", "with authentication on, the role of clients without credentials (unset: they are refused)", func(s *Settings) *string { return &s.Auth.AnonymousUserRole }),
		keySourceKey("tokenSecretKey", "HS256 secret of tokens: file:///path or data:;base64,...", func(s *Settings) *KeySource { return &s.Auth.TokenSecretKey }),
		keySourceKey("tokenPublicKey", "RS256/ES256 public key of tokens: file:///path or data:;base64,...", func(s *Settings) *KeySource { return &s.Auth.TokenPublicKey }),
		{Name: "tokenPublicAlg", Usage: "signature algorithm of tokens verified with tokenPublicKey",
			set: func(s *Settings, v string) error {
				switch v {
				case "RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512":
					s.Auth.TokenPublicAlg = v
					return nil
				}
				return fmt.Errorf("%q is not a public-key JWT algorithm (RS256, ES256, ...)", v)
			}, get: func(s *Settings) string { return s.Auth.TokenPublicAlg }},
		strKey("tokenAuthClaim", "", "token claim holding the role", func(s *Settings) *string { return &s.Auth.TokenAuthClaim }),
		strKey("tokenAudienceClaim", "", "token claim holding the audience (default aud)", func(s *Settings) *string { return &s.Auth.TokenAudienceClaim }),
		strKey("tokenAudience", "", "audience a token must name", func(s *Settings) *string { return &s.Auth.TokenAudience }),
		keySourceKey("basicAuthConf", "htpasswd file of the basic provider: a path, file:///path or data:;base64,...", func(s *Settings) *KeySource { return &s.Auth.BasicAuthConf }),
		boolKey("authenticateMetricsEndpoint", "", "/metrics needs credentials", func(s *Settings) *bool { return &s.Auth.AuthenticateMetricsEndpoint }),
		durationKey("authenticationRefreshCheckSeconds", "", time.Second, "how often connections' credentials are checked for expiry (AUTH_CHALLENGE)", func(s *Settings) *time.Duration { return &s.Auth.RefreshCheckInterval }),

		// Outgoing links to other brokers (replication): defaults that a remote cluster's own
		// data overrides (brokerClientTlsEnabled and its files as one set, the plugin and its
		// parameters as another).
		boolKey("brokerClientTlsEnabled", "", "default for outgoing links: TLS to a remote cluster whose data does not enable it (its brokerServiceUrlTls), always verified", func(s *Settings) *bool { return &s.BrokerClient.TLSEnabled }),
		strKey("brokerClientTrustCertsFilePath", "", "default for outgoing links: PEM CA certificates remote brokers are verified against (empty: the system's roots)", func(s *Settings) *string { return &s.BrokerClient.TrustCertsFile }),
		strKey("brokerClientCertificateFilePath", "", "default for outgoing links: PEM client certificate presented to remote brokers", func(s *Settings) *string { return &s.BrokerClient.CertificateFile }),
		strKey("brokerClientKeyFilePath", "", "PEM private key of brokerClientCertificateFilePath", func(s *Settings) *string { return &s.BrokerClient.KeyFile }),
		strKey("brokerClientAuthenticationPlugin", "", "default for outgoing links: Pulsar client authentication class (AuthenticationToken, AuthenticationTls, AuthenticationBasic) for a remote cluster whose data names none", func(s *Settings) *string { return &s.BrokerClient.AuthenticationPlugin }),
		secretKey(strKey("brokerClientAuthenticationParameters", "", "parameters of brokerClientAuthenticationPlugin (token:..., file:///path, {\"tlsCertFile\":...,\"tlsKeyFile\":...}, {\"userId\":...,\"password\":...})", func(s *Settings) *string { return &s.BrokerClient.AuthenticationParameters })),
		boolKey("tlsHostnameVerificationEnabled", "", "Meridian's replication links verify host names whatever this says", func(s *Settings) *bool { return &s.BrokerClient.HostnameVerification }),
		boolKey("brokerClientTlsEnabledWithKeyStore", "", "key stores are not supported: true is refused", func(s *Settings) *bool { return &s.BrokerClient.tlsEnabledWithKeyStore }),
	}
	for i := range keys {
		k := &keys[i]
		if k.Name != "" {
			if byName[k.Name] != nil {
				panic("config: key " + k.Name + " listed twice")
			}
			byName[k.Name] = k
		}
		if k.Flag != "" {
			if byFlag[k.Flag] != nil {
				panic("config: flag " + k.Flag + " listed twice")
			}
			byFlag[k.Flag] = k
		}
	}
}

func strKey(name, flag, usage string, field func(*Settings) *string) Key {
	return Key{Name: name, Flag: flag, Usage: usage,
		set: func(s *Settings, v string) error { *field(s) = v; return nil },
		get: func(s *Settings) string { return *field(s) }}
}

func secretKey(k Key) Key {
	k.Secret = true
	k.get = func(s *Settings) string { return "" }
	return k
}

func intKey(name, flag, usage string, field func(*Settings) *int) Key {
	return Key{Name: name, Flag: flag, Usage: usage,
		set: func(s *Settings, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("%q is not a whole number", v)
			}
			*field(s) = n
			return nil
		},
		get: func(s *Settings) string { return strconv.Itoa(*field(s)) }}
}

func boolKey(name, flag, usage string, field func(*Settings) *bool) Key {
	return Key{Name: name, Flag: flag, Usage: usage, Bool: true,
		set: func(s *Settings, v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("%q is not true or false", v)
			}
			*field(s) = b
			return nil
		},
		get: func(s *Settings) string { return strconv.FormatBool(*field(s)) }}
}

func listKey(name, flag, usage string, field func(*Settings) *[]string) Key {
	return Key{Name: name, Flag: flag, Usage: usage, List: true,
		set: func(s *Settings, v string) error { *field(s) = splitList(v); return nil },
		get: func(s *Settings) string { return strings.Join(*field(s), ",") }}
}

// durationKey is a whole number of unit (Pulsar's *Seconds and *Ms keys).
func durationKey(name, flag string, unit time.Duration, usage string, field func(*Settings) *time.Duration) Key {
	return Key{Name: name, Flag: flag, Usage: usage,
		set: func(s *Settings, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 || n > int64(365*24*time.Hour/unit) {
				return fmt.Errorf("%q is not a number of %s from 0 to a year", v, unitName(unit))
			}
			*field(s) = time.Duration(n) * unit
			return nil
		},
		get: func(s *Settings) string { return strconv.FormatInt(int64(*field(s)/unit), 10) }}
}

func unitName(unit time.Duration) string {
	if unit == time.Millisecond {
		return "milliseconds"
	}
	return "seconds"
}

func keySourceKey(name, usage string, field func(*Settings) *KeySource) Key {
	return Key{Name: name, Usage: usage, Secret: true,
		set: func(s *Settings, v string) error {
			ks, err := ParseKeySource(v)
			if err != nil {
				return err
			}
			*field(s) = ks
			return nil
		},
		get: func(s *Settings) string { return field(s).String() }}
}

// portKey is one of Pulsar's listener ports; empty turns the listener off.
func portKey(i int, usage string) Key {
	l := listeners[i]
	return Key{Name: l.port, Usage: usage, emptyMeansOff: true,
		set: func(s *Settings, v string) error {
			if v != "" {
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 || n > 65535 {
					return fmt.Errorf("%q is not a port (0 to 65535; 0 picks a free port)", v)
				}
			}
			s.listen.ports[i] = &v
			return nil
		},
		get: func(s *Settings) string { return portOf(*l.addr(s)) }}
}

// numListeners: plaintext and TLS, binary protocol and web.
const numListeners = 4

// listenKeys are bindAddress and the port keys of a file, resolved into the listener addresses
// once every file-level source is applied.
type listenKeys struct {
	bind  *string
	ports [numListeners]*string
}

// resolveListeners turns bindAddress and the port keys into listener addresses: a port key sets
// its listener to bindAddress (or the listener's current host) and that port, or turns it off
// when empty; bindAddress alone moves the listeners that are on to its host.
func (s *Settings) resolveListeners() {
	for i, l := range listeners {
		addr := l.addr(s)
		host := hostOf(*addr)
		if host == "" && i >= 2 {
			host = hostOf(*listeners[i-2].addr(s)) // a TLS listener defaults to its plaintext twin's host
		}
		if host == "" {
			host = "127.0.0.1"
		}
		if s.listen.bind != nil && *s.listen.bind != "" {
			host = *s.listen.bind
		}
		switch port := s.listen.ports[i]; {
		case port != nil && *port == "":
			*addr = ""
		case port != nil:
			*addr = net.JoinHostPort(host, *port)
		case *addr != "" && s.listen.bind != nil:
			*addr = net.JoinHostPort(host, portOf(*addr))
		}
	}
	s.listen = listenKeys{}
}

func hostOf(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	return h
}

func portOf(addr string) string {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	return p
}

func splitList(v string) []string {
	var out []string
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

func setProviders(s *Settings, v string) error {
	var out []AuthProvider
	for _, class := range splitList(v) {
		switch p := AuthProvider(class); p {
		case AuthProviderTLS, AuthProviderToken, AuthProviderBasic:
			out = append(out, p)
		default:
			return fmt.Errorf("%q is not an authentication provider Meridian implements (AuthenticationProviderTls, AuthenticationProviderToken, AuthenticationProviderBasic)", class)
		}
	}
	s.Auth.Providers = out
	return nil
}

func joinProviders(ps []AuthProvider) string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = string(p)
	}
	return strings.Join(names, ",")
}
