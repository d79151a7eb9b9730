package replication

import (
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/client"
	"github.com/meridian-mq/meridian/internal/tlsreload/tlstest"
)

// TestLinkConfigOf: the remote cluster's Pulsar fields make the link's URL, TLS and credentials;
// verification is on unless tlsAllowInsecureConnection; what cannot be honoured is an error that
// names the field and never the credential.
func TestLinkConfigOf(t *testing.T) {
	dir, caFile, certFile, keyFile := linkFiles(t)
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("file-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := adminapi.ClusterData{ServiceURL: "http://west:8080", BrokerServiceURL: "pulsar://west:6650",
		ServiceURLTLS: "https://west:8443", BrokerServiceURLTLS: "pulsar+ssl://west:6651"}

	plain, err := linkConfigOf("west", base, LinkDefaults{})
	if err != nil || plain.brokerURL != "pulsar://west:6650" || plain.tls != nil || plain.creds != nil || plain.adminURL != "http://west:8080" {
		t.Fatalf("plaintext link: %+v %v", plain, err)
	}

	secured := base
	secured.BrokerClientTLSEnabled = true
	secured.BrokerClientTrustCertsFilePath = caFile
	secured.AuthenticationPlugin = pluginToken
	secured.AuthenticationParameters = "token:secret-token-value"
	lc, err := linkConfigOf("west", secured, LinkDefaults{})
	if err != nil {
		t.Fatal(err)
	}
	if lc.brokerURL != "pulsar+ssl://west:6651" || lc.adminURL != "https://west:8443" || lc.tls == nil || lc.tls.InsecureSkipVerify || lc.tls.RootCAs == nil {
		t.Fatalf("TLS link: %+v", lc)
	}
	if d, _ := lc.creds.Data(); lc.creds.Method() != "token" || string(d) != "secret-token-value" {
		t.Fatalf("token credentials %v", lc.creds)
	}
	if lc.key == plain.key {
		t.Fatal("the link key does not change with the link's security")
	}

	for params, want := range map[string]string{"file://" + tokenFile: "file-token", `{"token":"json-token"}`: "json-token", "bare-token": "bare-token"} {
		c, err := credentialsOf(pluginToken, params, nil)
		if err != nil {
			t.Fatalf("%s: %v", params, err)
		}
		if d, err := c.Data(); err != nil || string(d) != want {
			t.Errorf("%s: %q %v", params, d, err)
		}
	}
	c, err := credentialsOf(pluginTLS, "tlsCertFile:"+certFile+",tlsKeyFile:"+keyFile, lc.tls.Clone())
	if err != nil || c != (client.TLSCertificate{}) {
		t.Fatalf("AuthenticationTls: %v %v", c, err)
	}
	c, err = credentialsOf(pluginBasic, `{"userId":"u","password":"p"}`, nil)
	if d, _ := c.Data(); err != nil || c.Method() != "basic" || string(d) != "u:p" {
		t.Fatalf("AuthenticationBasic: %v", err)
	}

	insecure := secured
	insecure.TLSAllowInsecureConnection = true
	if lc, err := linkConfigOf("west", insecure, LinkDefaults{}); err != nil || !lc.tls.InsecureSkipVerify {
		t.Fatalf("tlsAllowInsecureConnection: %+v %v", lc, err)
	}

	for name, tc := range map[string]struct {
		edit func(*adminapi.ClusterData)
		want string
	}{
		"no TLS URL":       {func(d *adminapi.ClusterData) { d.BrokerServiceURLTLS = "" }, "brokerServiceUrlTls"},
		"missing CA file":  {func(d *adminapi.ClusterData) { d.BrokerClientTrustCertsFilePath = filepath.Join(dir, "none.pem") }, "brokerClientTrustCertsFilePath"},
		"CA file not PEM":  {func(d *adminapi.ClusterData) { d.BrokerClientTrustCertsFilePath = tokenFile }, "no PEM"},
		"unknown plugin":   {func(d *adminapi.ClusterData) { d.AuthenticationPlugin = "com.example.Kerberos" }, "com.example.Kerberos"},
		"params no plugin": {func(d *adminapi.ClusterData) { d.AuthenticationPlugin = "" }, "without authenticationPlugin"},
		"tls auth no tls": {func(d *adminapi.ClusterData) {
			d.BrokerClientTLSEnabled = false
			d.AuthenticationPlugin = pluginTLS
		}, "needs brokerClientTlsEnabled"},
	} {
		d := secured
		tc.edit(&d)
		_, err := linkConfigOf("west", d, LinkDefaults{})
		if !errors.Is(err, ErrLinkSecurity) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrLinkSecurity naming %q", name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret-token-value") {
			t.Errorf("%s: the error shows the token", name)
		}
	}
}

// linkFiles writes a CA and a client certificate signed by it into a temporary directory.
func linkFiles(t *testing.T) (dir, caFile, certFile, keyFile string) {
	t.Helper()
	dir = t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	caFile = ca.WriteCA(t, dir, "ca")
	certFile, keyFile = ca.Client(t, "link").Write(t, dir, "client")
	return dir, caFile, certFile, keyFile
}

// TestLinkDefaults: the broker's brokerClient* settings secure a link to a cluster whose data says
// nothing (TLS verified with their CA, whatever the cluster's tlsAllowInsecureConnection; their
// credentials), and a cluster's own TLS or credentials replace them as whole sets.
func TestLinkDefaults(t *testing.T) {
	dir, caFile, certFile, keyFile := linkFiles(t)
	otherCA := tlstest.NewCA(t, "other").WriteCA(t, dir, "other")
	defaults := LinkDefaults{TLSEnabled: true, TrustCertsFile: caFile, AuthenticationPlugin: pluginTLS,
		AuthenticationParameters: `{"tlsCertFile":"` + certFile + `","tlsKeyFile":"` + keyFile + `"}`}
	if err := defaults.Check(); err != nil {
		t.Fatalf("Check: %v", err)
	}
	bare := adminapi.ClusterData{ServiceURL: "http://west:8080", BrokerServiceURL: "pulsar://west:6650",
		ServiceURLTLS: "https://west:8443", BrokerServiceURLTLS: "pulsar+ssl://west:6651",
		TLSAllowInsecureConnection: true} // without brokerClientTlsEnabled it has no effect

	lc, err := linkConfigOf("west", bare, defaults)
	if err != nil {
		t.Fatal(err)
	}
	if lc.brokerURL != "pulsar+ssl://west:6651" || lc.adminURL != "https://west:8443" || lc.tls == nil || lc.tls.InsecureSkipVerify ||
		lc.tls.RootCAs == nil || len(lc.tls.Certificates) != 1 || lc.creds != (client.TLSCertificate{}) {
		t.Fatalf("link from the defaults: %+v", lc)
	}
	plain, err := linkConfigOf("west", bare, LinkDefaults{})
	if err != nil || plain.tls != nil || plain.creds != nil || plain.key == lc.key {
		t.Fatalf("link without defaults: %+v %v", plain, err)
	}

	// The cluster's own TLS and token replace the defaults' TLS and certificate.
	own := bare
	own.TLSAllowInsecureConnection = false
	own.BrokerClientTLSEnabled, own.BrokerClientTrustCertsFilePath = true, otherCA
	own.AuthenticationPlugin, own.AuthenticationParameters = pluginToken, "token:cluster-token"
	lc2, err := linkConfigOf("west", own, defaults)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := lc2.creds.Data(); lc2.creds.Method() != "token" || string(d) != "cluster-token" || len(lc2.tls.Certificates) != 0 ||
		lc2.tls.RootCAs.Equal(lc.tls.RootCAs) {
		t.Fatalf("the cluster's own settings did not replace the defaults: %+v", lc2)
	}

	// Credentials alone: a plaintext cluster gets the default token.
	tokenOnly := LinkDefaults{AuthenticationPlugin: "token", AuthenticationParameters: "token:default-token"}
	lc3, err := linkConfigOf("west", bare, tokenOnly)
	if d, _ := lc3.creds.Data(); err != nil || lc3.tls != nil || string(d) != "default-token" {
		t.Fatalf("default token on a plaintext link: %+v %v", lc3, err)
	}

	// A default TLS needs the cluster's TLS URL; the error says the TLS came from the defaults.
	noTLSURL := bare
	noTLSURL.BrokerServiceURLTLS = ""
	if _, err := linkConfigOf("west", noTLSURL, defaults); !errors.Is(err, ErrLinkSecurity) ||
		!strings.Contains(err.Error(), "brokerServiceUrlTls") || !strings.Contains(err.Error(), "broker's brokerClient* settings") {
		t.Fatalf("default TLS without brokerServiceUrlTls: %v", err)
	}
}

// TestLinkDefaultsCheck: unusable defaults are refused at startup, naming the setting and never
// the credential.
func TestLinkDefaultsCheck(t *testing.T) {
	dir := t.TempDir()
	if err := (LinkDefaults{}).Check(); err != nil {
		t.Fatalf("no defaults: %v", err)
	}
	for name, tc := range map[string]struct {
		d    LinkDefaults
		want string
	}{
		"params without plugin": {LinkDefaults{AuthenticationParameters: "token:secret-value"}, "without brokerClientAuthenticationPlugin"},
		"unknown plugin":        {LinkDefaults{AuthenticationPlugin: "com.example.Kerberos", AuthenticationParameters: "secret-value"}, "com.example.Kerberos"},
		"token without params":  {LinkDefaults{AuthenticationPlugin: pluginToken}, "needs authenticationParameters"},
		"missing CA":            {LinkDefaults{TLSEnabled: true, TrustCertsFile: filepath.Join(dir, "none.pem")}, "brokerClientTrustCertsFilePath"},
		"missing client cert": {LinkDefaults{AuthenticationPlugin: pluginTLS,
			AuthenticationParameters: `{"tlsCertFile":"` + filepath.Join(dir, "c.pem") + `","tlsKeyFile":"secret-value"}`}, "tlsCertFile"},
	} {
		err := tc.d.Check()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret-value") {
			t.Errorf("%s: the error shows the credential: %v", name, err)
		}
	}
}

// TestLinkAdminClientUsesTheDefaults: the broker's other calls to a remote cluster's admin API
// (switchover's partition question) go over the link's TLS and credentials, the broker's defaults
// included, through real HTTPS: the remote sees the default token, and its certificate is verified
// against the default CA.
func TestLinkAdminClientUsesTheDefaults(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer default-token" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte(`{"partitions":3}`))
	}))
	defer srv.Close()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(srv.URL, "https://")
	cd := adminapi.ClusterData{ServiceURL: "http://" + host, ServiceURLTLS: srv.URL, BrokerServiceURL: "pulsar://" + host, BrokerServiceURLTLS: "pulsar+ssl://" + host}
	defaults := LinkDefaults{TLSEnabled: true, TrustCertsFile: caFile, AuthenticationPlugin: pluginToken, AuthenticationParameters: "token:default-token"}
	c, err := LinkAdminClient("west", cd, defaults, &http.Client{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	md, err := c.GetPartitionedMetadata(t.Context(), "persistent://public/default/t")
	if err != nil || md.Partitions != 3 {
		t.Fatalf("partitions through the link's admin client: %+v %v", md, err)
	}
	// Without the defaults the plaintext URL is used, and the remote refuses.
	if c, err := LinkAdminClient("west", cd, LinkDefaults{}, &http.Client{Timeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	} else if _, err := c.GetPartitionedMetadata(t.Context(), "persistent://public/default/t"); err == nil {
		t.Fatal("a plaintext call without credentials succeeded")
	}
}
