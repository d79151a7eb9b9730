package replication

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/meridian-mq/meridian/adminapi"
)

// LinkDefaults are the broker's own settings for its outgoing links (Pulsar's brokerClient* keys
// of broker.conf): what a replication link to a remote cluster uses where the remote cluster's
// data says nothing, as Pulsar's replication client does. The cluster's data overrides them as two
// whole sets, never field by field:
//
//   - TLS: a cluster whose data has brokerClientTlsEnabled=true uses its own TLS fields
//     (brokerClientTrustCertsFilePath, brokerClientCertificateFilePath, brokerClientKeyFilePath,
//     tlsAllowInsecureConnection); a cluster without it uses TLS when TLSEnabled is set, with these
//     files and with verification always on (the broker's tlsAllowInsecureConnection is about
//     the certificates of its own clients, never about the remotes it dials).
//   - Credentials: a cluster whose data names an authenticationPlugin uses its own plugin and
//     parameters; a cluster without one uses AuthenticationPlugin and AuthenticationParameters.
type LinkDefaults struct {
	TLSEnabled                                     bool
	TrustCertsFile, CertificateFile, KeyFile       string
	AuthenticationPlugin, AuthenticationParameters string
}

// withDefaults returns cd with the defaults filled in where its data has none (see LinkDefaults),
// and what came from the defaults (for error messages).
func (d LinkDefaults) withDefaults(cd adminapi.ClusterData) (adminapi.ClusterData, linkSources) {
	var src linkSources
	if !cd.BrokerClientTLSEnabled && d.TLSEnabled {
		cd.BrokerClientTLSEnabled = true
		cd.TLSAllowInsecureConnection = false
		cd.BrokerClientTrustCertsFilePath = d.TrustCertsFile
		cd.BrokerClientCertificateFilePath = d.CertificateFile
		cd.BrokerClientKeyFilePath = d.KeyFile
		src.tls = true
	}
	if cd.AuthenticationPlugin == "" && cd.AuthenticationParameters == "" && d.AuthenticationPlugin != "" {
		cd.AuthenticationPlugin = d.AuthenticationPlugin
		cd.AuthenticationParameters = d.AuthenticationParameters
		src.creds = true
	}
	return cd, src
}

// linkSources says which of a link's settings are the broker's defaults rather than the cluster's.
type linkSources struct{ tls, creds bool }

// describe names where a failing setting came from.
func (s linkSources) describe() string {
	switch {
	case s.tls && s.creds:
		return " (TLS and credentials from the broker's brokerClient* settings)"
	case s.tls:
		return " (TLS from the broker's brokerClient* settings)"
	case s.creds:
		return " (credentials from the broker's brokerClientAuthenticationPlugin/Parameters)"
	}
	return ""
}

// Check reports whether the defaults can be used at all: a plugin Meridian's links implement,
// parameters it can read, certificate and key files that load. It runs at startup, so that a
// broker whose configuration names credentials it cannot use refuses to start rather than
// replicate without them. Errors name the setting, never a credential.
func (d LinkDefaults) Check() error {
	if d.AuthenticationPlugin == "" {
		if d.AuthenticationParameters != "" {
			return errors.New("brokerClientAuthenticationParameters is set without brokerClientAuthenticationPlugin")
		}
		if !d.TLSEnabled {
			return nil
		}
	}
	probe := adminapi.ClusterData{BrokerServiceURL: "pulsar://defaults.invalid:6650", BrokerServiceURLTLS: "pulsar+ssl://defaults.invalid:6651"}
	if !d.TLSEnabled && (d.AuthenticationPlugin == pluginTLS || d.AuthenticationPlugin == "tls") {
		// AuthenticationTls presents a certificate, so it needs TLS: from the defaults, or from a
		// cluster's data that enables it. Check the certificate with TLS on.
		probe.BrokerClientTLSEnabled = true
	}
	_, err := linkConfigOf("", probe, d)
	return err
}

// LinkAdminClient is a client of a registered remote cluster's admin API over its link's TLS and
// credentials (the cluster's data, else the defaults): for the broker's calls to another cluster
// outside replication (switchover asks the target for partition counts).
func LinkAdminClient(name string, cd adminapi.ClusterData, defaults LinkDefaults, base *http.Client) (*adminapi.Client, error) {
	lc, err := linkConfigOf(name, cd, defaults)
	if err != nil {
		return nil, err
	}
	if lc.adminURL == "" {
		return nil, fmt.Errorf("%w: %q has no serviceUrl", ErrClusterNotRegistered, name)
	}
	return adminapi.NewClient(lc.adminURL, lc.httpClient(base))
}

// BrokerHTTPClient is a client of the other brokers of this cluster with this broker's own
// brokerClient* TLS and credentials: for calls a broker makes by itself, with no caller's
// credentials to pass on (a bundle hand-over).
func BrokerHTTPClient(defaults LinkDefaults, base *http.Client) (*http.Client, error) {
	// The peers' URLs come from the cluster's registry, not from here: placeholders satisfy the
	// check that a link has somewhere to go.
	lc, err := linkConfigOf("", adminapi.ClusterData{BrokerServiceURL: "pulsar://peer", BrokerServiceURLTLS: "pulsar+ssl://peer"}, defaults)
	if err != nil {
		return nil, err
	}
	return lc.httpClient(base), nil
}
