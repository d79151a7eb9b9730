package main

import (
	"bytes"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/node"
)

// parseWithEnv parses args as `meridian standalone` would with environ as the process
// environment, and returns the node options and what was logged.
func parseWithEnv(t *testing.T, environ []string, args ...string) ([]node.Options, string, error) {
	t.Helper()
	f := &standaloneFlags{}
	cmd := newStandaloneCommandFor(f)
	if err := cmd.ParseFlags(args); err != nil {
		return nil, "", err
	}
	var logs bytes.Buffer
	opts, err := f.nodeOptions(environ, &logs)
	return opts, logs.String(), err
}

func writeConf(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "broker.conf")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestConfigFileFlagsOverride: the file's settings reach the node; PULSAR_PREFIX_ variables
// override the file, MERIDIAN_STANDALONE_ variables override those, and flags override everything.
func TestConfigFileFlagsOverride(t *testing.T) {
	conf := writeConf(t, `
# a Pulsar standalone.conf, trimmed
clusterName=east
bindAddress=127.0.0.1
brokerServicePort=7650
brokerServicePortTls=7651
webServicePort=9080
webServicePortTls=9443
maxMessageSize=1048576
brokerDeduplicationEnabled=true
keepAliveIntervalSeconds=15
tlsCertificateFilePath=/certs/broker.pem
tlsKeyFilePath=/certs/broker.key
tlsTrustCertsFilePath=/certs/ca.pem
tlsRequireTrustedClientCertOnConnect=true
tlsProtocols=TLSv1.3
tlsCertRefreshCheckDurationSec=10
data-dir=/from/file
fsync=interval
`)
	opts, _, err := parseWithEnv(t,
		[]string{"PULSAR_PREFIX_maxMessageSize=2097152", "MERIDIAN_STANDALONE_DATA_DIR=/from/env", "MERIDIAN_STANDALONE_FSYNC=always"},
		"--config", conf, "--cluster", "west", "--fsync", "interval", "--web-addr", "127.0.0.1:9999")
	if err != nil {
		t.Fatal(err)
	}
	o := opts[0]
	if o.Cluster != "west" || o.DataDir != "/from/env" || o.MaxMessageSize != 2097152 || o.Fsync != node.FsyncInterval || !o.Dedup ||
		o.BrokerAddr != "127.0.0.1:7650" || o.BrokerTLSAddr != "127.0.0.1:7651" || o.WebAddr != "127.0.0.1:9999" || o.WebTLSAddr != "127.0.0.1:9443" ||
		o.KeepAliveInterval != 15*time.Second {
		t.Errorf("options: %+v", o)
	}
	if o.TLS.CertificateFile != "/certs/broker.pem" || o.TLS.KeyFile != "/certs/broker.key" || o.TLS.TrustCertsFile != "/certs/ca.pem" ||
		!o.TLS.RequireTrustedClientCert || o.TLS.MinVersion != tls.VersionTLS13 || o.TLS.RefreshInterval != 10*time.Second {
		t.Errorf("TLS options: %+v", o.TLS)
	}
}

// TestConfigFileFromEnvironment: MERIDIAN_STANDALONE_CONFIG names the file when --config is not
// given.
func TestConfigFileFromEnvironment(t *testing.T) {
	conf := writeConf(t, "clusterName=east\n")
	opts, _, err := parseWithEnv(t, []string{"MERIDIAN_STANDALONE_CONFIG=" + conf})
	if err != nil || opts[0].Cluster != "east" {
		t.Fatalf("opts %+v, err %v", opts, err)
	}
}

// TestConfigUnknownKeysLoggedOnce: keys of Pulsar features Meridian does not have are listed in
// one log line and do not stop startup; a secret value never reaches the log.
func TestConfigUnknownKeysLoggedOnce(t *testing.T) {
	conf := writeConf(t, `
zookeeperServers=zk1:2181
managedLedgerDefaultEnsembleSize=1
loadBalancerPlacementStrategy=weightedRandomSelection
zookeeperServers=zk2:2181
tokenSecretKey=data:;base64,dG9wLXNlY3JldC12YWx1ZQ==
brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken
brokerClientAuthenticationParameters=token:top-secret-value
`)
	_, logs, err := parseWithEnv(t, nil, "--config", conf)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs, "does not use; ignored"); n != 1 {
		t.Errorf("%d lines about ignored keys, want 1:\n%s", n, logs)
	}
	if !strings.Contains(logs, "keys=loadBalancerPlacementStrategy,managedLedgerDefaultEnsembleSize,zookeeperServers") {
		t.Errorf("ignored keys not listed once each, sorted:\n%s", logs)
	}
	if strings.Contains(logs, "top-secret-value") || strings.Contains(logs, "dG9wLXNlY3JldC12YWx1ZQ") {
		t.Errorf("a secret value was logged:\n%s", logs)
	}
}

// TestConfigRefusesWhatItCannotHonour: a security setting this build cannot honour stops startup
// with the key named, wherever it comes from; so does a missing or unreadable file.
func TestConfigRefusesWhatItCannotHonour(t *testing.T) {
	for _, tc := range []struct {
		file string
		env  []string
		want string
	}{
		{"authenticationEnabled=true\n", nil, "needs authenticationProviders"},
		{"authenticationEnabled=true\nauthenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderBasic\n", nil, "AuthenticationProviderBasic needs basicAuthConf"},
		{"authenticationEnabled=true\nauthenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderToken\n", nil, "needs tokenSecretKey or tokenPublicKey"},
		{"authenticationEnabled=true\nauthenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderTls\n", nil, "AuthenticationProviderTls needs a TLS listener"},
		{"authorizationEnabled=true\n", nil, "authorizationEnabled=true"},
		{"brokerClientTlsEnabled=true\nbrokerClientTrustCertsFilePath=/nonexistent/ca.pem\n", nil, "brokerClientTrustCertsFilePath"},
		{"brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken\n", nil, "needs authenticationParameters"},
		{"brokerClientAuthenticationPlugin=com.example.Custom\nbrokerClientAuthenticationParameters=x\n", nil, "brokerClientAuthenticationPlugin"},
		{"authenticationProviders=com.example.Custom\n", nil, "not an authentication provider Meridian implements"},
		{"tlsProtocols=TLSv1.1\n", nil, "TLS 1.2 is the minimum"},
		{"brokerServicePortTls=6651\n", nil, "--tls-cert-file"},
		{"brokerServicePortTls=6651\ntlsCertificateFilePath=/c\ntlsKeyFilePath=/k\ntlsRequireTrustedClientCertOnConnect=true\n", nil, "--tls-trust-certs-file"},
		{"", []string{"PULSAR_PREFIX_authorizationEnabled=true"}, "authorizationEnabled=true"},
		{"bindAddress=0.0.0.0\nadvertisedAddress=h\n", nil, "--insecure-allow-plaintext"},
		{"line without equals\n", nil, "line 1"},
	} {
		_, _, err := parseWithEnv(t, tc.env, "--config", writeConf(t, tc.file))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q %v: error %v, want one containing %q", tc.file, tc.env, err, tc.want)
		}
	}
	if _, _, err := parseWithEnv(t, nil, "--config", filepath.Join(t.TempDir(), "missing.conf")); err == nil || !strings.Contains(err.Error(), "missing.conf") {
		t.Errorf("missing file: %v", err)
	}
}

// TestConfigTLSOnlyOnEveryInterface: TLS listeners need no --insecure-allow-plaintext; turning
// the plaintext ones off in the file makes a broker that serves only TLS on every interface.
func TestConfigTLSOnlyOnEveryInterface(t *testing.T) {
	conf := writeConf(t, `
bindAddress=0.0.0.0
advertisedAddress=broker.example.com
brokerServicePort=
webServicePort=
brokerServicePortTls=6651
webServicePortTls=8443
tlsCertificateFilePath=/certs/broker.pem
tlsKeyFilePath=/certs/broker.key
`)
	opts, _, err := parseWithEnv(t, nil, "--config", conf)
	if err != nil {
		t.Fatal(err)
	}
	o := opts[0]
	if o.BrokerAddr != "" || o.WebAddr != "" || o.BrokerTLSAddr != "0.0.0.0:6651" || o.WebTLSAddr != "0.0.0.0:8443" {
		t.Errorf("listeners %q %q %q %q", o.BrokerAddr, o.WebAddr, o.BrokerTLSAddr, o.WebTLSAddr)
	}
	// The same with the plaintext listeners left on is refused.
	if _, _, err := parseWithEnv(t, nil, "--config", conf, "--broker-addr", "0.0.0.0:6650"); err == nil || !strings.Contains(err.Error(), "--insecure-allow-plaintext") {
		t.Errorf("plaintext on every interface: %v", err)
	}
}

// TestClustersModeFromConfigShiftsTLSPorts: --clusters works from a file too, and every
// listener of cluster i, TLS ones included, is on its port + 10*i.
func TestClustersModeFromConfigShiftsTLSPorts(t *testing.T) {
	conf := writeConf(t, `
clusters=a,b
brokerServicePortTls=6651
webServicePortTls=8443
tlsCertificateFilePath=/certs/broker.pem
tlsKeyFilePath=/certs/broker.key
data-dir=/d
`)
	opts, _, err := parseWithEnv(t, nil, "--config", conf)
	if err != nil {
		t.Fatal(err)
	}
	if len(opts) != 2 || opts[1].Cluster != "b" || opts[1].DataDir != "/d/b" || opts[1].BrokerAddr != "127.0.0.1:6660" ||
		opts[1].BrokerTLSAddr != "127.0.0.1:6661" || opts[1].WebTLSAddr != "127.0.0.1:8453" {
		t.Errorf("clusters: %+v", opts)
	}
	if _, _, err := parseWithEnv(t, nil, "--config", conf, "--cluster", "x"); err == nil || !strings.Contains(err.Error(), "--cluster cannot be combined") {
		t.Errorf("--cluster with clusters from the file: %v", err)
	}
	// Replication links do not authenticate: clusters with authentication need an anonymous role.
	authConf := writeConf(t, "clusters=a,b\nauthenticationEnabled=true\nauthenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderToken\ntokenSecretKey=data:;base64,MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n")
	if _, _, err := parseWithEnv(t, nil, "--config", authConf); err == nil || !strings.Contains(err.Error(), "needs anonymousUserRole") {
		t.Errorf("clusters with authentication and no anonymous role: %v", err)
	}
}

// TestConfigAuthenticationAllowsPlaintext: with authentication on, plaintext listeners on every
// interface need no --insecure-allow-plaintext (as in Pulsar); the authentication settings reach
// the node.
func TestConfigAuthenticationAllowsPlaintext(t *testing.T) {
	conf := writeConf(t, `
bindAddress=0.0.0.0
advertisedAddress=broker.example.com
authenticationEnabled=true
authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderToken
tokenSecretKey=data:;base64,MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=
anonymousUserRole=guest
`)
	opts, _, err := parseWithEnv(t, nil, "--config", conf)
	if err != nil {
		t.Fatal(err)
	}
	a := opts[0].Auth
	if opts[0].BrokerAddr != "0.0.0.0:6650" || !a.AuthenticationEnabled || a.AnonymousUserRole != "guest" || !a.TokenSecretKey.IsSet() {
		t.Errorf("options: %+v", opts[0])
	}
}

// TestMaxConnectionsPerIPFromFileAndFlag: Pulsar's brokerMaxConnectionsPerIp reaches the node,
// the flag overrides it, and a negative value is refused.
func TestMaxConnectionsPerIPFromFileAndFlag(t *testing.T) {
	conf := writeConf(t, "brokerMaxConnectionsPerIp=7\n")
	opts, _, err := parseWithEnv(t, nil, "--config", conf)
	if err != nil || opts[0].MaxConnectionsPerIP != 7 {
		t.Fatalf("from the file: %v %v", opts, err)
	}
	opts, _, err = parseWithEnv(t, nil, "--config", conf, "--max-connections-per-ip", "3")
	if err != nil || opts[0].MaxConnectionsPerIP != 3 {
		t.Fatalf("flag over file: %v %v", opts, err)
	}
	if _, _, err := parseWithEnv(t, nil, "--max-connections-per-ip", "-1"); err == nil || !strings.Contains(err.Error(), "max-connections-per-ip") {
		t.Fatalf("negative: %v", err)
	}
}

// TestConnectionBoundsSettings: the per-connection bounds are on by default, set by the file
// (Pulsar's maxPendingPublishRequestsPerConnection) and flags, and a bytes bound of 0 leaves only
// the broker-wide budget.
func TestConnectionBoundsSettings(t *testing.T) {
	opts, _, err := parseWithEnv(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o := opts[0]; o.MaxPendingPublishRequests != 4000 || o.MaxPendingPublishBytes != 32<<20 || o.MaxOutboundBytes != 64<<20 {
		t.Fatalf("defaults: %d requests, %d bytes, %d outbound", o.MaxPendingPublishRequests, o.MaxPendingPublishBytes, o.MaxOutboundBytes)
	}
	opts, _, err = parseWithEnv(t, nil, "--config", writeConf(t, "maxPendingPublishRequestsPerConnection=1000\n"),
		"--max-pending-publish-bytes", "0", "--max-outbound-bytes", "1048576")
	if err != nil {
		t.Fatal(err)
	}
	if o := opts[0]; o.MaxPendingPublishRequests != 1000 || o.MaxPendingPublishBytes != -1 || o.MaxOutboundBytes != 1<<20 {
		t.Fatalf("set: %d requests, %d bytes, %d outbound", o.MaxPendingPublishRequests, o.MaxPendingPublishBytes, o.MaxOutboundBytes)
	}
	for _, args := range [][]string{{"--max-pending-publish-requests", "0"}, {"--max-pending-publish-bytes", "-1"}, {"--max-outbound-bytes", "1000"}} {
		if _, _, err := parseWithEnv(t, nil, args...); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}
