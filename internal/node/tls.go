package node

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridian-mq/meridian/internal/config"
	"github.com/meridian-mq/meridian/internal/tlsreload"
)

// The TLS listeners: the binary protocol over TLS (pulsar+ssl://) and the web listener over
// HTTPS. Both present one identity, served by a tlsreload.Reloader from the certificate, key and
// CA files and read again when their content changes, so a certificate rotated on disk reaches new
// connections without a restart.

// tlsListeners are what a node with TLS holds beside its plaintext listeners.
type tlsListeners struct {
	identity *tlsreload.Reloader
	broker   net.Listener // raw TCP; wrapped in tls.NewListener when served
	web      net.Listener // raw TCP; wrapped in tls.NewListener when served

	serviceURL string // pulsar+ssl://advertised:port, or empty
	webURL     string // https://advertised:port, or empty
}

// validateTLS checks the TLS options against the TLS listeners asked for.
func (o *Options) validateTLS() []error {
	if o.BrokerTLSAddr == "" && o.WebTLSAddr == "" {
		return nil
	}
	var errs []error
	if o.TLS.CertificateFile == "" || o.TLS.KeyFile == "" {
		errs = append(errs, errors.New("a TLS listener needs a certificate and its key: --tls-cert-file and --tls-key-file (tlsCertificateFilePath, tlsKeyFilePath)"))
	}
	if o.TLS.RequireTrustedClientCert && o.TLS.TrustCertsFile == "" {
		errs = append(errs, errors.New("--tls-require-trusted-client-cert (tlsRequireTrustedClientCertOnConnect) needs the CA certificates to verify clients with: --tls-trust-certs-file (tlsTrustCertsFilePath)"))
	}
	if o.TLS.RequireTrustedClientCert && o.TLS.AllowInsecureConnection {
		errs = append(errs, errors.New("tlsRequireTrustedClientCertOnConnect contradicts tlsAllowInsecureConnection: a required client certificate must be verified"))
	}
	if o.TLS.MinVersion != 0 && o.TLS.MinVersion < tls.VersionTLS12 {
		errs = append(errs, errors.New("TLS versions below 1.2 are not supported"))
	}
	return errs
}

// clientAuthOf maps Pulsar's client-certificate switches to crypto/tls: mutual TLS when required;
// with tlsAllowInsecureConnection a certificate is taken without verification (it proves
// nothing); otherwise a certificate is optional and, when given, must verify against the CA file.
// Without a CA file no certificate is asked for.
func clientAuthOf(t config.TLS) tls.ClientAuthType {
	switch {
	case t.RequireTrustedClientCert:
		return tls.RequireAndVerifyClientCert
	case t.AllowInsecureConnection:
		return tls.RequestClientCert
	case t.TrustCertsFile != "":
		return tls.VerifyClientCertIfGiven
	default:
		return tls.NoClientCert
	}
}

// listenTLS loads the TLS identity and binds the TLS listeners that are configured. Errors name the
// file or the listener.
func (n *Node) listenTLS() error {
	o := n.opts
	if o.BrokerTLSAddr == "" && o.WebTLSAddr == "" {
		return nil
	}
	var err error
	n.tls.identity, err = tlsreload.New(tlsreload.Files{
		CertFile: o.TLS.CertificateFile, KeyFile: o.TLS.KeyFile, CAFile: o.TLS.TrustCertsFile,
	}, tlsreload.Options{RefreshInterval: o.TLS.RefreshInterval, Logger: n.log.With("component", "tls")})
	if err != nil {
		return fmt.Errorf("TLS files: %w", err)
	}
	if o.BrokerTLSAddr != "" {
		if n.tls.broker, err = net.Listen("tcp", o.BrokerTLSAddr); err != nil {
			return fmt.Errorf("listen on --broker-tls-addr %s: %w", o.BrokerTLSAddr, err)
		}
		n.tls.serviceURL = hostPortURL("pulsar+ssl", advertisedHost(o.AdvertisedAddress, n.tls.broker.Addr()), n.tls.broker.Addr())
	}
	if o.WebTLSAddr != "" {
		if n.tls.web, err = net.Listen("tcp", o.WebTLSAddr); err != nil {
			return fmt.Errorf("listen on --web-tls-addr %s: %w", o.WebTLSAddr, err)
		}
		n.tls.webURL = hostPortURL("https", advertisedHost(o.AdvertisedAddress, n.tls.web.Addr()), n.tls.web.Addr())
	}
	return nil
}

// tlsConfig is the config of one TLS listener: the current identity at every handshake, the
// policy of the options. nextProtos are the ALPN protocols offered.
func (n *Node) tlsConfig(nextProtos ...string) *tls.Config {
	t := n.opts.TLS
	return n.tls.identity.ServerConfig(tlsreload.ServerPolicy{
		ClientAuth:   clientAuthOf(t),
		MinVersion:   t.MinVersion,
		MaxVersion:   t.MaxVersion,
		CipherSuites: t.CipherSuites,
		NextProtos:   nextProtos,
	})
}

// closeUnservedTLS closes TLS listeners that were bound but never handed to a server (a start
// that failed half-way).
func (n *Node) closeUnservedTLS() {
	if n.tls.broker != nil && n.components.server == nil {
		_ = n.tls.broker.Close()
	}
}

// ServiceURLTLS is the advertised binary-protocol URL over TLS, pulsar+ssl://host:port, or empty
// without that listener.
func (n *Node) ServiceURLTLS() string { return n.tls.serviceURL }

// WebURLTLS is the advertised admin URL over HTTPS, https://host:port, or empty without that
// listener.
func (n *Node) WebURLTLS() string { return n.tls.webURL }

// BrokerTLSAddr is the address the pulsar+ssl:// listener is bound to; nil without one.
func (n *Node) BrokerTLSAddr() net.Addr {
	if n.tls.broker == nil {
		return nil
	}
	return n.tls.broker.Addr()
}

// WebTLSAddr is the address the HTTPS listener is bound to; nil without one.
func (n *Node) WebTLSAddr() net.Addr {
	if n.tls.web == nil {
		return nil
	}
	return n.tls.web.Addr()
}

// tlsCollector exports the TLS counters of the binary-protocol server.
type tlsCollector struct{ n *Node }

var descTLSHandshakeFailures = prometheus.NewDesc("meridian_tls_handshake_failures_total",
	"Connections on the pulsar+ssl:// listener closed because the TLS handshake failed (a client certificate that does not verify, a plaintext client, a timeout).", nil, nil)

func (tc *tlsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descTLSHandshakeFailures }

func (tc *tlsCollector) Collect(ch chan<- prometheus.Metric) {
	if s := tc.n.components.server; s != nil {
		ch <- prometheus.MustNewConstMetric(descTLSHandshakeFailures, prometheus.CounterValue, float64(s.Stats().TLSHandshakeFailures))
	}
}

// tlsWebListener is the HTTPS listener for the web server (HTTP/1.1 over TLS), or nil without one.
func (n *Node) tlsWebListener() net.Listener {
	if n.tls.web == nil {
		return nil
	}
	return tls.NewListener(n.tls.web, n.tlsConfig("http/1.1"))
}

// tlsBrokerListener is the pulsar+ssl:// listener for the binary-protocol server, or nil without
// one.
func (n *Node) tlsBrokerListener() net.Listener {
	if n.tls.broker == nil {
		return nil
	}
	return tls.NewListener(n.tls.broker, n.tlsConfig())
}
