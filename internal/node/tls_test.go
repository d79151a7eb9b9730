package node

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/tlsreload/tlstest"
)

// tlsFiles writes a CA and a server certificate for 127.0.0.1 into dir.
func tlsFiles(t *testing.T) (ca *tlstest.CA, certFile, keyFile, caFile string) {
	t.Helper()
	dir := t.TempDir()
	ca = tlstest.NewCA(t, "test-ca")
	certFile, keyFile = ca.Server(t, "broker").Write(t, dir, "broker")
	return ca, certFile, keyFile, ca.WriteCA(t, dir, "ca")
}

func httpsClient(ca *tlstest.CA, cert *tls.Certificate) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

// TestTLSOnlyNode: a node with only TLS listeners serves the admin API over HTTPS, registers its
// cluster with the TLS URLs only, answers HTTP lookups with them, and refuses a client that does
// not trust its CA.
func TestTLSOnlyNode(t *testing.T) {
	ca, certFile, keyFile, _ := tlsFiles(t)
	o := testOptions(t, t.TempDir())
	o.BrokerAddr, o.WebAddr = "", ""
	o.BrokerTLSAddr, o.WebTLSAddr = "127.0.0.1:0", "127.0.0.1:0"
	o.TLS.CertificateFile, o.TLS.KeyFile = certFile, keyFile
	n := startNode(t, o)
	if n.ServiceURL() != "" || n.WebURL() != "" || !strings.HasPrefix(n.ServiceURLTLS(), "pulsar+ssl://127.0.0.1:") || !strings.HasPrefix(n.WebURLTLS(), "https://127.0.0.1:") {
		t.Fatalf("URLs %q %q %q %q", n.ServiceURL(), n.WebURL(), n.ServiceURLTLS(), n.WebURLTLS())
	}
	hc := httpsClient(ca, nil)
	defer hc.CloseIdleConnections()
	get := func(path string, into any) {
		t.Helper()
		resp, err := hc.Get(n.WebURLTLS() + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		if into != nil {
			if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
		}
	}
	get("/admin/v2/brokers/ready", nil)
	var cd adminapi.ClusterData
	get("/admin/v2/clusters/standalone", &cd)
	if cd.ServiceURL != "" || cd.BrokerServiceURL != "" || cd.ServiceURLTLS != n.WebURLTLS() || cd.BrokerServiceURLTLS != n.ServiceURLTLS() {
		t.Errorf("cluster data %+v", cd)
	}
	var lookup struct {
		BrokerURL    string `json:"brokerUrl"`
		BrokerURLTLS string `json:"brokerUrlTls"`
		HTTPURLTLS   string `json:"httpUrlTls"`
	}
	get("/lookup/v2/topic/persistent/public/default/t", &lookup)
	if lookup.BrokerURL != "" || lookup.BrokerURLTLS != n.ServiceURLTLS() || lookup.HTTPURLTLS != n.WebURLTLS() {
		t.Errorf("lookup %+v", lookup)
	}

	// The binary protocol's TLS listener completes a handshake with a client trusting the CA and
	// refuses one trusting another CA.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	c, err := tls.Dial("tcp", n.BrokerTLSAddr().String(), &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatalf("TLS dial with the right CA: %v", err)
	}
	_ = c.Close()
	other := tlstest.NewCA(t, "other-ca")
	if _, err := httpsClient(other, nil).Get(n.WebURLTLS() + "/admin/v2/brokers/ready"); err == nil {
		t.Error("HTTPS with another CA: no error")
	}
}

// TestTLSNodeRequiresClientCertificates: with tlsRequireTrustedClientCertOnConnect a client
// without a certificate, or with one from another CA, is refused; one with a certificate the trust
// file verifies is served.
func TestTLSNodeRequiresClientCertificates(t *testing.T) {
	ca, certFile, keyFile, caFile := tlsFiles(t)
	o := testOptions(t, t.TempDir())
	o.WebTLSAddr = "127.0.0.1:0"
	o.TLS.CertificateFile, o.TLS.KeyFile, o.TLS.TrustCertsFile = certFile, keyFile, caFile
	o.TLS.RequireTrustedClientCert = true
	n := startNode(t, o)
	ready := n.WebURLTLS() + "/admin/v2/brokers/ready"

	pairCert := func(p tlstest.Pair) *tls.Certificate {
		c, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return &c
	}
	if resp, err := httpsClient(ca, nil).Get(ready); err == nil {
		resp.Body.Close()
		t.Error("no client certificate: served")
	}
	if resp, err := httpsClient(ca, pairCert(tlstest.NewCA(t, "other").Client(t, "mallory"))).Get(ready); err == nil {
		resp.Body.Close()
		t.Error("client certificate of another CA: served")
	}
	hc := httpsClient(ca, pairCert(ca.Client(t, "alice")))
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(ready)
	if err != nil {
		t.Fatalf("trusted client certificate: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("trusted client certificate: %s", resp.Status)
	}
}

// TestTLSOptionsRefused: TLS listeners without the files they need, or without any listener of a
// kind, are refused before anything starts.
func TestTLSOptionsRefused(t *testing.T) {
	for _, tc := range []struct {
		modify func(*Options)
		want   string
	}{
		{func(o *Options) { o.BrokerTLSAddr = "127.0.0.1:0" }, "--tls-cert-file"},
		{func(o *Options) {
			o.WebTLSAddr = "127.0.0.1:0"
			o.TLS.CertificateFile, o.TLS.KeyFile, o.TLS.RequireTrustedClientCert = "c", "k", true
		}, "--tls-trust-certs-file"},
		{func(o *Options) { o.BrokerAddr = "" }, "no binary-protocol listener"},
		{func(o *Options) { o.WebAddr = "" }, "no web listener"},
		{func(o *Options) { o.WebAddr = "10.1.2.3:8080" }, "--insecure-allow-plaintext"},
		{func(o *Options) {
			o.WebTLSAddr = "0.0.0.0:8443"
			o.TLS.CertificateFile, o.TLS.KeyFile = "c", "k"
		}, "--advertised-address"},
	} {
		o := testOptions(t, t.TempDir())
		tc.modify(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one containing %q", err, tc.want)
		}
	}
	// A certificate file that does not exist stops the start, naming the file.
	o := testOptions(t, t.TempDir())
	o.BrokerTLSAddr = "127.0.0.1:0"
	o.TLS.CertificateFile, o.TLS.KeyFile = "/nonexistent/broker.pem", "/nonexistent/broker.key"
	if _, err := Start(t.Context(), o); err == nil || !strings.Contains(err.Error(), "/nonexistent/broker.pem") {
		t.Errorf("start with missing certificate: %v", err)
	}
}
