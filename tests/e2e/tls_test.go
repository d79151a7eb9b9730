package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin/auth"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridian-mq/meridian/internal/tlsreload/tlstest"
	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// tlsBroker is a `meridian standalone` process started with --config FILE, a Pulsar-format
// configuration file that turns on the TLS listeners (pulsar+ssl:// and https://) beside the
// harness's plaintext loopback listeners.
type tlsBroker struct {
	*harness.Process
	dir                string
	ca                 *tlstest.CA
	caFile             string
	certFile, keyFile  string
	tlsURL, httpsURL   string
	tlsAddr, httpsAddr string
}

// startTLSBroker writes a CA, a server certificate for 127.0.0.1 and a configuration file with
// extra appended, and starts the broker with it.
func startTLSBroker(t *testing.T, extra string) *tlsBroker {
	t.Helper()
	return startTLSBrokerEnv(t, extra, nil)
}

// startTLSBrokerEnv is startTLSBroker with extra environment for the process.
func startTLSBrokerEnv(t *testing.T, extra string, env []string) *tlsBroker {
	t.Helper()
	b := &tlsBroker{dir: t.TempDir(), ca: tlstest.NewCA(t, "meridian-test-ca")}
	b.caFile = b.ca.WriteCA(t, b.dir, "ca")
	b.certFile, b.keyFile = b.ca.Server(t, "broker-1").Write(t, b.dir, "broker")
	b.tlsAddr, b.httpsAddr = harness.FreeAddr(t), harness.FreeAddr(t)
	b.tlsURL, b.httpsURL = "pulsar+ssl://"+b.tlsAddr, "https://"+b.httpsAddr
	conf := filepath.Join(b.dir, "broker.conf")
	text := fmt.Sprintf(`# Pulsar-format configuration
clusterName=tls-east
# overridden by the harness's --broker-addr/--web-addr flags
brokerServicePort=1
webServicePort=1
brokerServicePortTls=%s
webServicePortTls=%s
tlsCertificateFilePath=%s
tlsKeyFilePath=%s
tlsTrustCertsFilePath=%s
tlsProtocols=TLSv1.3,TLSv1.2
# Pulsar settings Meridian does not have: logged once, ignored
zookeeperServers=127.0.0.1:2181
managedLedgerDefaultEnsembleSize=1
%s
`, port(t, b.tlsAddr), port(t, b.httpsAddr), b.certFile, b.keyFile, b.caFile, extra)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	b.Process = harness.StartStandalone(t, harness.Options{ExtraArgs: []string{"--config", conf}, Env: env})
	return b
}

func port(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// tlsClient is a pulsar-client-go client on pulsar+ssl:// trusting caFile, verifying the host name.
func tlsClient(t *testing.T, url, caFile string, modify func(*pulsar.ClientOptions)) (pulsar.Client, error) {
	t.Helper()
	opts := pulsar.ClientOptions{
		URL:                   url,
		TLSTrustCertsFilePath: caFile,
		TLSValidateHostname:   true,
		ConnectionTimeout:     10 * time.Second,
		OperationTimeout:      10 * time.Second,
		Logger:                harness.ClientLogger(),
		MetricsRegisterer:     prometheus.NewRegistry(),
	}
	if modify != nil {
		modify(&opts)
	}
	c, err := pulsar.NewClient(opts)
	if err != nil {
		return nil, err
	}
	t.Cleanup(c.Close)
	return c, nil
}

// httpsAdmin is a pulsaradmin client on https:// trusting caFile; its idle connections are closed
// before the broker stops.
func httpsAdmin(t *testing.T, url, caFile string) pulsaradmin.Client {
	t.Helper()
	cfg := &pulsaradmin.Config{WebServiceURL: url, TLSTrustCertsFilePath: caFile, TLSEnableHostnameVerification: true}
	transport, err := auth.NewDefaultTransport(cfg)
	if err != nil {
		t.Fatalf("pulsaradmin transport: %v", err)
	}
	if tr, ok := transport.(*http.Transport); ok {
		t.Cleanup(tr.CloseIdleConnections)
	}
	a, err := pulsaradmin.NewClient(cfg)
	if err != nil {
		t.Fatalf("pulsaradmin: %v", err)
	}
	return a
}

// produceConsume sends n messages on a new topic and receives them, in order.
func produceConsume(t *testing.T, c pulsar.Client, n int) {
	t.Helper()
	topic := harness.Topic(t)
	ctx := testCtx(t, 30*time.Second)
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	if err != nil {
		t.Fatalf("Subscribe over TLS: %v", err)
	}
	defer cons.Close()
	prod, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatalf("CreateProducer over TLS: %v", err)
	}
	defer prod.Close()
	for i := range n {
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "m-%d", i)}); err != nil {
			t.Fatalf("Send %d over TLS: %v", i, err)
		}
	}
	for i := range n {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("Receive %d over TLS: %v", i, err)
		}
		if got, want := string(m.Payload()), fmt.Sprintf("m-%d", i); got != want {
			t.Fatalf("message %d = %q, want %q", i, got, want)
		}
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTLSConfigFileServesPulsarSSLAndHTTPS: a broker configured from a Pulsar-format file serves
// the real Pulsar client over pulsar+ssl:// (the LOOKUP answers send it to the TLS URL) and the
// real admin client over HTTPS; the cluster registers its TLS URLs; the file's unknown keys are
// logged once; the flags override the file's ports and the file's cluster name stands.
func TestTLSConfigFileServesPulsarSSLAndHTTPS(t *testing.T) {
	b := startTLSBroker(t, "")
	c, err := tlsClient(t, b.tlsURL, b.caFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	produceConsume(t, c, 20)

	adm := httpsAdmin(t, b.httpsURL, b.caFile)
	clusters, err := adm.Clusters().List()
	if err != nil {
		t.Fatalf("admin over HTTPS: %v", err)
	}
	if len(clusters) != 1 || clusters[0] != "tls-east" {
		t.Errorf("clusters %v, want [tls-east] (clusterName of the file)", clusters)
	}
	cd, err := adm.Clusters().Get("tls-east")
	if err != nil {
		t.Fatal(err)
	}
	if cd.BrokerServiceURLTls != b.tlsURL || cd.ServiceURLTls != b.httpsURL || cd.BrokerServiceURL != b.ServiceURL() || cd.ServiceURL != b.WebURL() {
		t.Errorf("cluster data %+v; want TLS URLs %s %s and plaintext %s %s", cd, b.tlsURL, b.httpsURL, b.ServiceURL(), b.WebURL())
	}
	// The HTTP lookup service a client on https:// uses gives it the TLS broker URL.
	hc, err := tlsClient(t, b.httpsURL, b.caFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	produceConsume(t, hc, 3)

	logs := b.Logs()
	if n := strings.Count(logs, "configuration keys Meridian does not use; ignored"); n != 1 ||
		!strings.Contains(logs, "keys=managedLedgerDefaultEnsembleSize,zookeeperServers") {
		t.Errorf("ignored keys logged %d times; log:\n%s", n, logs)
	}
}

// TestTLSWrongCARefused: a client trusting another CA is refused on both TLS listeners, and the
// broker logs the failed handshake; plaintext clients are unaffected.
func TestTLSWrongCARefused(t *testing.T) {
	b := startTLSBroker(t, "")
	otherCA := tlstest.NewCA(t, "some-other-ca").WriteCA(t, t.TempDir(), "other")
	refusedClient(t, "pulsar+ssl:// with another CA", b.tlsURL, otherCA, nil)
	if _, err := httpsAdmin(t, b.httpsURL, otherCA).Clusters().List(); err == nil {
		t.Fatal("HTTPS with another CA: request served")
	}
	harness.Eventually(t, 10*time.Second, "the broker logs the refused handshakes", func() error {
		logs := b.Logs()
		if !strings.Contains(logs, "TLS handshake failed") || !strings.Contains(logs, "TLS handshake error") {
			return fmt.Errorf("no handshake failure in the log")
		}
		return nil
	})
	produceConsume(t, harness.NewClient(t, b, nil), 2)
}

// TestTLSMutualRequiresTrustedClientCertificate: with tlsRequireTrustedClientCertOnConnect a
// client without a certificate, or with one of another CA, is refused; a client with a certificate
// of the trusted CA produces and consumes, and pulsaradmin with one is served over HTTPS.
func TestTLSMutualRequiresTrustedClientCertificate(t *testing.T) {
	b := startTLSBroker(t, "tlsRequireTrustedClientCertOnConnect=true")
	clientDir := t.TempDir()
	goodCert, goodKey := b.ca.Client(t, "app-1").Write(t, clientDir, "app-1")
	badCert, badKey := tlstest.NewCA(t, "rogue").Client(t, "app-1").Write(t, clientDir, "rogue")

	refusedClient(t, "no client certificate", b.tlsURL, b.caFile, nil)
	refusedClient(t, "client certificate of another CA", b.tlsURL, b.caFile, func(o *pulsar.ClientOptions) { o.TLSCertificateFile, o.TLSKeyFilePath = badCert, badKey })

	c, err := tlsClient(t, b.tlsURL, b.caFile, func(o *pulsar.ClientOptions) { o.TLSCertificateFile, o.TLSKeyFilePath = goodCert, goodKey })
	if err != nil {
		t.Fatal(err)
	}
	produceConsume(t, c, 5)

	cfg := &pulsaradmin.Config{WebServiceURL: b.httpsURL, TLSTrustCertsFilePath: b.caFile, TLSCertFile: goodCert, TLSKeyFile: goodKey}
	adm, err := pulsaradmin.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adm.Clusters().List(); err != nil {
		t.Errorf("pulsaradmin with a trusted client certificate: %v", err)
	}
	if _, err := httpsAdmin(t, b.httpsURL, b.caFile).Clusters().List(); err == nil {
		t.Error("pulsaradmin without a client certificate: served")
	}
}

// TestTLSCertificateSwappedOnDisk: a certificate replaced on disk (written whole and renamed into
// place, as certificate managers do) is what the next new connection gets, without a restart;
// connections made before keep working. The new certificate is issued by a new CA, so a client
// that trusts only the old CA is refused afterwards and one that trusts the new CA is served.
func TestTLSCertificateSwappedOnDisk(t *testing.T) {
	b := startTLSBroker(t, "tlsCertRefreshCheckDurationSec=0")
	before, err := tlsClient(t, b.tlsURL, b.caFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	produceConsume(t, before, 2)
	if cn := servedCN(t, b.tlsAddr, b.ca); cn != "broker-1" {
		t.Fatalf("served certificate CN %q, want broker-1", cn)
	}

	newCA := tlstest.NewCA(t, "meridian-test-ca-2")
	newCAFile := newCA.WriteCA(t, t.TempDir(), "ca2")
	pair := newCA.Server(t, "broker-2")
	// Key first, then certificate: between the two renames the files do not match, and the broker
	// keeps the old identity until they do.
	if err := writeRenamed(b.keyFile, pair.KeyPEM); err != nil {
		t.Fatal(err)
	}
	if err := writeRenamed(b.certFile, pair.CertPEM); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 10*time.Second, "new connections get the new certificate", func() error {
		if cn := servedCN(t, b.tlsAddr, newCA); cn != "broker-2" {
			return fmt.Errorf("served CN %q", cn)
		}
		return nil
	})
	if cn := servedCN(t, b.httpsAddr, newCA); cn != "broker-2" {
		t.Errorf("HTTPS serves CN %q after the swap, want broker-2", cn)
	}
	after, err := tlsClient(t, b.tlsURL, newCAFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	produceConsume(t, after, 2)
	refusedClient(t, "a client trusting only the old CA, after the swap", b.tlsURL, b.caFile, nil)
	produceConsume(t, before, 2) // the connection made before the swap still works
	if !strings.Contains(b.Logs(), "TLS certificate reloaded") {
		t.Error("no 'TLS certificate reloaded' log line")
	}
}

// servedCN is the common name of the certificate a new TLS connection to addr gets, verified
// against ca (empty if it does not verify).
func servedCN(t *testing.T, addr string, ca *tlstest.CA) string {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := tls.Dialer{Config: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return ""
	}
	defer conn.Close()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates[0].Subject.CommonName
}

// writeRenamed writes data to a temporary file beside path and renames it into place.
func writeRenamed(path string, data []byte) error {
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// TestTLSVersionsBelow12Refused: a client offering only TLS 1.1 is refused.
func TestTLSVersionsBelow12Refused(t *testing.T) {
	b := startTLSBroker(t, "")
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(b.ca.PEM)
	for _, addr := range []string{b.tlsAddr, b.httpsAddr} {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11})
		if err == nil {
			conn.Close()
			t.Errorf("%s: a TLS 1.1 handshake succeeded", addr)
		}
	}
}
