package config

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// base is what cmd/meridian starts from: the node's defaults.
func base() Settings {
	return Settings{
		Cluster: "standalone", DataDir: "./data",
		BrokerAddr: "127.0.0.1:6650", WebAddr: "127.0.0.1:8080",
		MaxMessageSize: 5 << 20, Fsync: "always", AutoTopicCreation: true,
		TLS: DefaultTLS(), Auth: DefaultAuth(), BrokerClient: DefaultBrokerClient(),
	}
}

func mustParse(t *testing.T, text string) []Entry {
	t.Helper()
	e, err := Parse(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func apply(t *testing.T, src Sources) (Settings, Report) {
	t.Helper()
	s := base()
	rep, err := s.Apply(src)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return s, rep
}

func TestApplyFileSetsPulsarKeys(t *testing.T) {
	s, rep := apply(t, Sources{File: mustParse(t, `
clusterName=east
bindAddress=0.0.0.0
advertisedAddress=east.example.com
brokerServicePort=7650
brokerServicePortTls=7651
webServicePort=
webServicePortTls=9443
maxMessageSize=1048576
brokerDeduplicationEnabled=true
allowAutoTopicCreation=false
allowAutoTopicCreationType=non-partitioned
keepAliveIntervalSeconds=15
brokerShutdownTimeoutMs=3000
tlsCertificateFilePath=/certs/broker.pem
tlsKeyFilePath=/certs/broker.key
tlsTrustCertsFilePath=/certs/ca.pem
tlsRequireTrustedClientCertOnConnect=true
tlsProtocols=TLSv1.3
tlsCertRefreshCheckDurationSec=0
data-dir=/var/lib/meridian
fsync=interval
zookeeperServers=
transactionCoordinatorEnabled=true
managedLedgerDefaultEnsembleSize=1
`)})
	if s.Cluster != "east" || s.AdvertisedAddress != "east.example.com" || s.DataDir != "/var/lib/meridian" || s.Fsync != "interval" {
		t.Errorf("plain keys not applied: %+v", s)
	}
	if s.BrokerAddr != "0.0.0.0:7650" || s.BrokerTLSAddr != "0.0.0.0:7651" || s.WebAddr != "" || s.WebTLSAddr != "0.0.0.0:9443" {
		t.Errorf("listeners = %q %q %q %q", s.BrokerAddr, s.BrokerTLSAddr, s.WebAddr, s.WebTLSAddr)
	}
	if s.MaxMessageSize != 1<<20 || !s.Dedup || s.AutoTopicCreation || s.KeepAliveInterval != 15*time.Second || s.ShutdownTimeout != 3*time.Second {
		t.Errorf("numbers and switches not applied: %+v", s)
	}
	wantTLS := TLS{CertificateFile: "/certs/broker.pem", KeyFile: "/certs/broker.key", TrustCertsFile: "/certs/ca.pem",
		RequireTrustedClientCert: true, MinVersion: tls.VersionTLS13, MaxVersion: tls.VersionTLS13}
	if !reflect.DeepEqual(s.TLS, wantTLS) {
		t.Errorf("TLS = %+v, want %+v", s.TLS, wantTLS)
	}
	if want := []string{"managedLedgerDefaultEnsembleSize", "transactionCoordinatorEnabled", "zookeeperServers"}; !reflect.DeepEqual(rep.Ignored, want) {
		t.Errorf("ignored = %v, want %v", rep.Ignored, want)
	}
}

// TestPrecedence: defaults < file < PULSAR_PREFIX_ variables < MERIDIAN_STANDALONE_ variables <
// flags, setting by setting.
func TestPrecedence(t *testing.T) {
	s, _ := apply(t, Sources{
		File: mustParse(t, "clusterName=from-file\nmaxMessageSize=2000\nfsync=interval\nadvertisedAddress=file.example\nbrokerServicePort=1111\n"),
		Environ: []string{
			"PULSAR_PREFIX_maxMessageSize=3000", "PULSAR_PREFIX_advertisedAddress=pulsar-env.example",
			"MERIDIAN_STANDALONE_ADVERTISED_ADDRESS=meridian-env.example", "MERIDIAN_STANDALONE_FSYNC_PIPELINE=3",
			"MERIDIAN_STANDALONE_BROKER_ADDR=127.0.0.1:2222",
			"HOME=/root", "MERIDIAN_KEEP_LOGS=1",
		},
		Flags: []FlagValue{{"fsync-pipeline", "4"}, {"web-addr", ""}},
	})
	for name, got := range map[string][2]any{
		"cluster (file)":                       {s.Cluster, "from-file"},
		"fsync (file)":                         {s.Fsync, "interval"},
		"max message size (PULSAR_PREFIX_)":    {s.MaxMessageSize, 3000},
		"advertised (MERIDIAN_STANDALONE_)":    {s.AdvertisedAddress, "meridian-env.example"},
		"broker addr (env over the file port)": {s.BrokerAddr, "127.0.0.1:2222"},
		"fsync pipeline (flag)":                {s.FsyncPipeline, 4},
		"web addr (flag turns it off)":         {s.WebAddr, ""},
		"data dir (default)":                   {s.DataDir, "./data"},
	} {
		if got[0] != got[1] {
			t.Errorf("%s = %v, want %v", name, got[0], got[1])
		}
	}
}

func TestListenerKeys(t *testing.T) {
	for _, tc := range []struct {
		file                       string
		broker, web, brokerTLS, wt string
	}{
		{"", "127.0.0.1:6650", "127.0.0.1:8080", "", ""},
		{"bindAddress=0.0.0.0", "0.0.0.0:6650", "0.0.0.0:8080", "", ""},
		{"brokerServicePortTls=6651\nwebServicePortTls=8443", "127.0.0.1:6650", "127.0.0.1:8080", "127.0.0.1:6651", "127.0.0.1:8443"},
		{"brokerServicePort=\nwebServicePort=\nbrokerServicePortTls=6651\nwebServicePortTls=8443\nbindAddress=::1", "", "", "[::1]:6651", "[::1]:8443"},
		{"brokerServicePort=0\nwebServicePort=0", "127.0.0.1:0", "127.0.0.1:0", "", ""},
	} {
		s, _ := apply(t, Sources{File: mustParse(t, tc.file)})
		if s.BrokerAddr != tc.broker || s.WebAddr != tc.web || s.BrokerTLSAddr != tc.brokerTLS || s.WebTLSAddr != tc.wt {
			t.Errorf("%q: listeners %q %q %q %q, want %q %q %q %q", tc.file, s.BrokerAddr, s.WebAddr, s.BrokerTLSAddr, s.WebTLSAddr,
				tc.broker, tc.web, tc.brokerTLS, tc.wt)
		}
	}
}

func TestAuthKeysAreParsed(t *testing.T) {
	dir := t.TempDir()
	pub := filepath.Join(dir, "public.key")
	if err := os.WriteFile(pub, []byte("PUBLIC"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, _ := apply(t, Sources{File: mustParse(t, `
authenticationEnabled=true
authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderTls, org.apache.pulsar.broker.authentication.AuthenticationProviderToken,org.apache.pulsar.broker.authentication.AuthenticationProviderBasic
authorizationEnabled=true
authorizationProvider=org.apache.pulsar.broker.authorization.PulsarAuthorizationProvider
superUserRoles=localhost,superUser,admin
anonymousUserRole=anonymous
tokenSecretKey=data:;base64,c2VjcmV0LWtleQ==
tokenPublicKey=file://`+pub+`
tokenPublicAlg=ES256
tokenAuthClaim=role
tokenAudienceClaim=aud
tokenAudience=meridian
basicAuthConf=/conf/.htpasswd
authenticateMetricsEndpoint=true
authenticationRefreshCheckSeconds=30
brokerClientTlsEnabled=true
brokerClientTrustCertsFilePath=/certs/ca.pem
brokerClientCertificateFilePath=/certs/client.pem
brokerClientKeyFilePath=/certs/client.key
brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationTls
brokerClientAuthenticationParameters={"tlsCertFile":"/c.pem","tlsKeyFile":"/k.pem"}
tlsHostnameVerificationEnabled=true
`)})
	a := s.Auth
	if !a.AuthenticationEnabled || !a.AuthorizationEnabled || !reflect.DeepEqual(a.Providers, []AuthProvider{AuthProviderTLS, AuthProviderToken, AuthProviderBasic}) ||
		!reflect.DeepEqual(a.SuperUserRoles, []string{"localhost", "superUser", "admin"}) || a.AnonymousUserRole != "anonymous" ||
		a.TokenPublicAlg != "ES256" || a.TokenAuthClaim != "role" || a.TokenAudienceClaim != "aud" || a.TokenAudience != "meridian" ||
		!a.AuthenticateMetricsEndpoint || a.RefreshCheckInterval != 30*time.Second {
		t.Errorf("auth = %+v", a)
	}
	if secret, err := a.TokenSecretKey.Load(); err != nil || string(secret) != "secret-key" {
		t.Errorf("tokenSecretKey = %q, %v", secret, err)
	}
	if key, err := a.TokenPublicKey.Load(); err != nil || string(key) != "PUBLIC" {
		t.Errorf("tokenPublicKey = %q, %v", key, err)
	}
	if a.BasicAuthConf.Path != "/conf/.htpasswd" {
		t.Errorf("basicAuthConf = %+v", a.BasicAuthConf)
	}
	want := BrokerClient{TLSEnabled: true, TrustCertsFile: "/certs/ca.pem", CertificateFile: "/certs/client.pem", KeyFile: "/certs/client.key",
		AuthenticationPlugin: "org.apache.pulsar.client.impl.auth.AuthenticationTls", AuthenticationParameters: `{"tlsCertFile":"/c.pem","tlsKeyFile":"/k.pem"}`,
		HostnameVerification: true}
	if !reflect.DeepEqual(s.BrokerClient, want) {
		t.Errorf("broker client = %+v, want %+v", s.BrokerClient, want)
	}
}

func TestDefaultsWithoutSources(t *testing.T) {
	s, rep := apply(t, Sources{})
	if !reflect.DeepEqual(s, base()) || len(rep.Ignored) != 0 || len(rep.Warnings) != 0 {
		t.Fatalf("no sources changed the settings: %+v %+v", s, rep)
	}
	if s.Auth.TokenAuthClaim != "sub" || s.Auth.TokenPublicAlg != "RS256" || s.Auth.RefreshCheckInterval != time.Minute ||
		s.TLS.RefreshInterval != 5*time.Minute || s.TLS.MinVersion != tls.VersionTLS12 {
		t.Fatalf("defaults: %+v %+v", s.Auth, s.TLS)
	}
}

func TestEmptyValueInFileKeepsTheDefault(t *testing.T) {
	s, _ := apply(t, Sources{File: mustParse(t, "clusterName=\nmaxMessageSize=\ntokenAuthClaim=\nallowAutoTopicCreation=\n")})
	if s.Cluster != "standalone" || s.MaxMessageSize != 5<<20 || s.Auth.TokenAuthClaim != "sub" || !s.AutoTopicCreation {
		t.Fatalf("empty values changed defaults: %+v", s)
	}
}

func TestWarnings(t *testing.T) {
	_, rep := apply(t, Sources{FileName: "b.conf", File: mustParse(t, "fsync=always\nfsync=interval\n"),
		Environ: []string{"MERIDIAN_STANDALONE_NO_SUCH=1", "MERIDIAN_STANDALONE_CONFIG=/x.conf"}})
	joined := strings.Join(rep.Warnings, "\n")
	if !strings.Contains(joined, "b.conf: fsync is set on lines 1 and 2") || !strings.Contains(joined, "MERIDIAN_STANDALONE_NO_SUCH") ||
		strings.Contains(joined, "CONFIG") || len(rep.Warnings) != 2 {
		t.Fatalf("warnings = %q", rep.Warnings)
	}
}

// TestRefusals: values Meridian cannot honour stop startup with the key (and where it came from)
// named; a secret value is never repeated.
func TestRefusals(t *testing.T) {
	for _, tc := range []struct {
		src  Sources
		want []string
	}{
		{Sources{FileName: "a.conf", File: mustParse(t, "x=1\nmaxMessageSize=big")}, []string{`a.conf line 2: maxMessageSize: "big" is not a whole number`}},
		{Sources{File: mustParse(t, "brokerServicePortTls=66510")}, []string{"brokerServicePortTls", "not a port"}},
		{Sources{File: mustParse(t, "brokerDeduplicationEnabled=yes")}, []string{"brokerDeduplicationEnabled", "not true or false"}},
		{Sources{File: mustParse(t, "authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderAthenz")}, []string{"authenticationProviders", "AuthenticationProviderAthenz", "not an authentication provider Meridian implements"}},
		{Sources{File: mustParse(t, "authorizationProvider=com.example.Custom")}, []string{"authorizationProvider", "not supported by this build"}},
		{Sources{File: mustParse(t, "tlsProtocols=TLSv1.2,TLSv1.1")}, []string{"tlsProtocols", "TLSv1.1 is not supported: TLS 1.2 is the minimum"}},
		{Sources{File: mustParse(t, "tlsCiphers=TLS_RSA_WITH_RC4_128_SHA")}, []string{"tlsCiphers", "insecure"}},
		{Sources{File: mustParse(t, "tlsCiphers=TLS_AES_128_GCM_SHA256")}, []string{"tlsCiphers", "some TLS 1.3 suites"}},
		{Sources{File: mustParse(t, "tlsCiphers=TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384,TLS_CHACHA20_POLY1305_SHA256\ntlsProtocols=TLSv1.2")}, []string{"tlsCiphers names only TLS 1.3 suites"}},
		{Sources{File: mustParse(t, "tlsEnabled=true")}, []string{"tlsEnabled=true but no TLS listener"}},
		{Sources{File: mustParse(t, "tlsEnabledWithKeyStore=true")}, []string{"tlsEnabledWithKeyStore=true", "not supported by this build"}},
		{Sources{File: mustParse(t, "brokerClientTlsEnabledWithKeyStore=true")}, []string{"brokerClientTlsEnabledWithKeyStore=true"}},
		{Sources{File: mustParse(t, "tlsRequireTrustedClientCertOnConnect=true\ntlsAllowInsecureConnection=true")}, []string{"contradicts"}},
		{Sources{File: mustParse(t, "allowAutoTopicCreationType=partitioned")}, []string{"allowAutoTopicCreationType=partitioned"}},
		{Sources{File: mustParse(t, "tokenPublicAlg=HS256")}, []string{"tokenPublicAlg", "not a public-key JWT algorithm"}},
		{Sources{File: mustParse(t, "keepAliveIntervalSeconds=-1")}, []string{"keepAliveIntervalSeconds"}},
		{Sources{File: mustParse(t, "cluster=east")}, []string{"cluster: in a configuration file this setting is clusterName"}},
		{Sources{File: mustParse(t, "broker-addr=0.0.0.0:6650")}, []string{"broker-addr: a configuration file sets the listeners with bindAddress"}},
		{Sources{Environ: []string{"PULSAR_PREFIX_maxMessageSize=x"}}, []string{"environment PULSAR_PREFIX_maxMessageSize: maxMessageSize"}},
		{Sources{Environ: []string{"MERIDIAN_STANDALONE_DEDUP=maybe"}}, []string{"environment MERIDIAN_STANDALONE_DEDUP (--dedup)"}},
		{Sources{Flags: []FlagValue{{"max-message-size", "lots"}}}, []string{"--max-message-size"}},
	} {
		s := base()
		_, err := s.Apply(tc.src)
		if err == nil {
			t.Errorf("%+v: no error, want one with %q", tc.src, tc.want)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: error %q does not contain %q", tc.src, err, w)
			}
		}
	}
}

func TestSecretValuesAreNotRepeated(t *testing.T) {
	const secret = "data:;base64,!!!not-base64-TOPSECRET"
	s := base()
	_, err := s.Apply(Sources{File: mustParse(t, "tokenSecretKey="+secret)})
	if err == nil || !strings.Contains(err.Error(), "tokenSecretKey") || strings.Contains(err.Error(), "TOPSECRET") {
		t.Fatalf("error %v: want tokenSecretKey named and the value not shown", err)
	}
	s = base()
	if _, err := s.Apply(Sources{File: mustParse(t, "tokenSecretKey=data:;base64,c2VjcmV0\nbrokerClientAuthenticationParameters=token:SECRET")}); err != nil {
		t.Fatal(err)
	}
	for _, k := range Keys() {
		if k.Secret && strings.Contains(k.Get(&s), "SECRET") || strings.Contains(k.Get(&s), "c2VjcmV0") {
			t.Errorf("%s shows its secret: %q", k.Name, k.Get(&s))
		}
	}
}

func TestTLSCiphers(t *testing.T) {
	s, _ := apply(t, Sources{File: mustParse(t, "tlsCiphers=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384,TLS_CHACHA20_POLY1305_SHA256")})
	if want := []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384}; !reflect.DeepEqual(s.TLS.CipherSuites, want) || s.TLS.MinVersion != tls.VersionTLS12 {
		t.Fatalf("ciphers = %v (min %x), want %v", s.TLS.CipherSuites, s.TLS.MinVersion, want)
	}
	s, _ = apply(t, Sources{File: mustParse(t, "tlsCiphers=TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384,TLS_CHACHA20_POLY1305_SHA256")})
	if s.TLS.MinVersion != tls.VersionTLS13 {
		t.Fatalf("only TLS 1.3 suites named: min version %x, want TLS 1.3", s.TLS.MinVersion)
	}
}

func TestKeySource(t *testing.T) {
	for _, tc := range []struct {
		in       string
		path     string
		data     string
		shown    string
		wantsErr bool
	}{
		{in: "file:///etc/pulsar/secret.key", path: "/etc/pulsar/secret.key", shown: "file:///etc/pulsar/secret.key"},
		{in: "file://localhost/k", path: "/k"},
		{in: "/plain/path", path: "/plain/path"},
		{in: "data:;base64,c2VjcmV0", data: "secret", shown: "data: (6 bytes)"},
		{in: "data:application/octet-stream;base64,c2VjcmV0", data: "secret"},
		{in: "data:;base64,c2VjcmV0", data: "secret"},
		{in: "data:,hello%20world", data: "hello world"},
		{in: "data:;base64,c2VjcmV0LWtleQ", data: "secret-key"}, // without padding
		{in: "file://otherhost/k", wantsErr: true},
		{in: "data:no-comma", wantsErr: true},
		{in: "data:;base64,!!", wantsErr: true},
	} {
		ks, err := ParseKeySource(tc.in)
		if tc.wantsErr {
			if err == nil {
				t.Errorf("%q: no error", tc.in)
			}
			continue
		}
		if err != nil || ks.Path != tc.path || string(ks.Data) != tc.data || !ks.IsSet() {
			t.Errorf("%q = %+v, %v; want path %q data %q", tc.in, ks, err, tc.path, tc.data)
		}
		if tc.shown != "" && ks.String() != tc.shown {
			t.Errorf("%q shown as %q, want %q", tc.in, ks.String(), tc.shown)
		}
	}
	if _, err := (KeySource{}).Load(); err == nil {
		t.Error("Load of no source: no error")
	}
	big := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(big, make([]byte, MaxKeyBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := (KeySource{Path: big, set: true}).Load(); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("Load of an oversized file: %v", err)
	}
}

// TestPulsarClientSuiteConfigParses reads a configuration with every key of the one
// pulsar-client-go's CI starts Pulsar with (its integration-tests/conf/standalone.conf: TLS, three
// authentication providers, brokerClient* defaults for outgoing links, many Pulsar-only keys): it
// parses and passes RefuseUnimplemented, the security keys land in Settings, and every key
// Meridian does not use is a Pulsar key it knows to ignore (none is unknown).
func TestPulsarClientSuiteConfigParses(t *testing.T) {
	entries, err := os.ReadFile("testdata/pulsar-style-standalone.conf")
	if err != nil {
		t.Fatal(err)
	}
	// The client's CI gives the basic provider its htpasswd file outside the file (a Java system
	// property); here it comes from the environment.
	s, rep := apply(t, Sources{File: mustParse(t, string(entries)), Environ: []string{"PULSAR_PREFIX_basicAuthConf=/pulsar/conf/.htpasswd"}})
	if s.Cluster != "standalone" || s.BrokerAddr != "0.0.0.0:6650" || s.BrokerTLSAddr != "0.0.0.0:6651" || s.WebTLSAddr != "0.0.0.0:8443" ||
		s.AdvertisedAddress != "localhost" || s.MaxMessageSize != 1048576 || s.TLS.CertificateFile != "/pulsar/certs/broker-cert.pem" ||
		!s.Auth.AuthenticationEnabled || len(s.Auth.Providers) != 3 || s.Auth.TokenSecretKey.Path != "/pulsar/tokens/secret.key" ||
		s.ShutdownTimeout != 3*time.Second {
		t.Fatalf("settings from the client suite's standalone.conf: %+v", s)
	}
	want := BrokerClient{TLSEnabled: true, TrustCertsFile: "/pulsar/certs/cacert.pem",
		AuthenticationPlugin:     "org.apache.pulsar.client.impl.auth.AuthenticationTls",
		AuthenticationParameters: `{"tlsCertFile":"/pulsar/certs/client-cert.pem","tlsKeyFile":"/pulsar/certs/client-key.pem"}`}
	if !reflect.DeepEqual(s.BrokerClient, want) {
		t.Errorf("broker client = %+v, want %+v", s.BrokerClient, want)
	}
	if err := s.RefuseUnimplemented(); err != nil {
		t.Errorf("RefuseUnimplemented: %v", err)
	}
	for _, k := range []string{"zookeeperServers", "managedLedgerDefaultEnsembleSize", "transactionCoordinatorEnabled", "bookkeeperClientAuthenticationPlugin"} {
		if !slices.Contains(rep.Ignored, k) {
			t.Errorf("%s not reported as ignored: %v", k, rep.Ignored)
		}
	}
	if len(rep.Ignored) < 60 || len(rep.Unknown) != 0 {
		t.Errorf("%d ignored keys, unknown ones: %v; want every ignored key known", len(rep.Ignored), rep.Unknown)
	}
}

// TestUnknownKeysAreReportedApart: a key that is neither a setting nor a Pulsar key Meridian
// knows to ignore (a misspelling) is ignored and also reported as unknown; known Pulsar keys are
// not.
func TestUnknownKeysAreReportedApart(t *testing.T) {
	_, rep := apply(t, Sources{File: mustParse(t, "loadBalancerPlacementStrategy=x\nbackLogQuotaCheckEnabled=true\nsuperUserRole=admin\n")})
	if !reflect.DeepEqual(rep.Ignored, []string{"backLogQuotaCheckEnabled", "loadBalancerPlacementStrategy", "superUserRole"}) ||
		!reflect.DeepEqual(rep.Unknown, []string{"backLogQuotaCheckEnabled", "superUserRole"}) {
		t.Errorf("ignored %v, unknown %v", rep.Ignored, rep.Unknown)
	}
}

// TestBrokerClientDefaultsAccepted: the brokerClient* keys are defaults for outgoing links, not
// refused; a plugin the links cannot present is.
func TestBrokerClientDefaultsAccepted(t *testing.T) {
	s, _ := apply(t, Sources{File: mustParse(t, "brokerClientTlsEnabled=true\nbrokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken\nbrokerClientAuthenticationParameters=token:x\n")})
	if err := s.RefuseUnimplemented(); err != nil {
		t.Errorf("brokerClient* defaults refused: %v", err)
	}
	s, _ = apply(t, Sources{File: mustParse(t, "brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.oauth2.AuthenticationOAuth2\n")})
	if err := s.RefuseUnimplemented(); err == nil || !strings.Contains(err.Error(), "brokerClientAuthenticationPlugin") {
		t.Errorf("an unimplemented client plugin: %v", err)
	}
}
