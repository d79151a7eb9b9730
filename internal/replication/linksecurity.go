package replication

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/client"
)

// A replication link's security comes from the remote cluster's data, with Pulsar's fields:
// brokerClientTlsEnabled (then brokerServiceUrlTls and serviceUrlTls are used), the CA file that
// verifies the remote (brokerClientTrustCertsFilePath; the system's roots without it), the
// remote's host name verified unless tlsAllowInsecureConnection, a client certificate
// (brokerClientCertificateFilePath, brokerClientKeyFilePath), and the credentials
// (authenticationPlugin, authenticationParameters). docs/security.md, "Replication links".

// Pulsar's client authentication plugins a link can use.
const (
	pluginToken = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
	pluginTLS   = "org.apache.pulsar.client.impl.auth.AuthenticationTls"
	pluginBasic = "org.apache.pulsar.client.impl.auth.AuthenticationBasic"
)

// ErrLinkSecurity: the remote cluster's TLS or authentication fields cannot be used. The link
// does not start (its lastError says why) rather than fall back to less security.
var ErrLinkSecurity = errors.New("replication: link security")

// linkConfig is how to reach a remote cluster.
type linkConfig struct {
	brokerURL, adminURL string
	tls                 *tls.Config // nil: plaintext
	creds               client.Credentials
	// key identifies the configuration (a change rebuilds the remote's client); it holds the
	// fields, never logged.
	key string
}

// linkConfigOf derives the link's configuration from the cluster's data, with the broker's
// defaults where the data has none (LinkDefaults). Errors name the field and where it came from,
// never a credential.
func linkConfigOf(name string, data adminapi.ClusterData, defaults LinkDefaults) (linkConfig, error) {
	cd, src := defaults.withDefaults(data)
	lc := linkConfig{brokerURL: cd.BrokerServiceURL, adminURL: cd.ServiceURL}
	bad := func(format string, args ...any) (linkConfig, error) {
		if name == "" { // LinkDefaults.Check
			return linkConfig{}, fmt.Errorf("%w: the broker's brokerClient* settings: %s", ErrLinkSecurity, fmt.Sprintf(format, args...))
		}
		return linkConfig{}, fmt.Errorf("%w: cluster %q: %s%s", ErrLinkSecurity, name, fmt.Sprintf(format, args...), src.describe())
	}
	if cd.BrokerClientTLSEnabled {
		if cd.BrokerServiceURLTLS == "" {
			return bad("brokerClientTlsEnabled=true needs brokerServiceUrlTls")
		}
		lc.brokerURL = cd.BrokerServiceURLTLS
		if cd.ServiceURLTLS != "" {
			lc.adminURL = cd.ServiceURLTLS
		}
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: cd.TLSAllowInsecureConnection} //nolint:gosec // only when the cluster's data asks for it
		if f := cd.BrokerClientTrustCertsFilePath; f != "" {
			pem, err := os.ReadFile(f)
			if err != nil {
				return bad("brokerClientTrustCertsFilePath: %v", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return bad("brokerClientTrustCertsFilePath %s holds no PEM certificate", f)
			}
			cfg.RootCAs = pool
		}
		if cd.BrokerClientCertificateFilePath != "" || cd.BrokerClientKeyFilePath != "" {
			pair, err := tls.LoadX509KeyPair(cd.BrokerClientCertificateFilePath, cd.BrokerClientKeyFilePath)
			if err != nil {
				return bad("brokerClientCertificateFilePath/brokerClientKeyFilePath: %v", err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		lc.tls = cfg
	}
	if lc.brokerURL == "" {
		return bad("no brokerServiceUrl")
	}
	creds, err := credentialsOf(cd.AuthenticationPlugin, cd.AuthenticationParameters, lc.tls)
	if err != nil {
		return bad("%v", err)
	}
	lc.creds = creds
	lc.key = strings.Join([]string{lc.brokerURL, lc.adminURL, fmt.Sprint(cd.BrokerClientTLSEnabled, cd.TLSAllowInsecureConnection),
		cd.BrokerClientTrustCertsFilePath, cd.BrokerClientCertificateFilePath, cd.BrokerClientKeyFilePath,
		cd.AuthenticationPlugin, cd.AuthenticationParameters}, "\x00")
	return lc, nil
}

// credentialsOf reads Pulsar's client authentication plugin and parameters (the forms Pulsar's
// clients accept). The error never contains the parameters.
func credentialsOf(plugin, params string, tlsCfg *tls.Config) (client.Credentials, error) {
	switch plugin {
	case "":
		if params != "" {
			return nil, errors.New("authenticationParameters without authenticationPlugin")
		}
		return nil, nil
	case pluginToken, "token":
		return tokenCredentials(params)
	case pluginTLS, "tls":
		if tlsCfg == nil {
			return nil, errors.New("AuthenticationTls needs brokerClientTlsEnabled=true")
		}
		kv, err := pluginParams(params)
		if err != nil {
			return nil, err
		}
		pair, err := tls.LoadX509KeyPair(kv["tlsCertFile"], kv["tlsKeyFile"])
		if err != nil {
			return nil, fmt.Errorf("AuthenticationTls: tlsCertFile/tlsKeyFile: %v", err)
		}
		tlsCfg.Certificates = []tls.Certificate{pair}
		return client.TLSCertificate{}, nil
	case pluginBasic, "basic":
		kv, err := pluginParams(params)
		if err != nil {
			return nil, err
		}
		if kv["userId"] == "" || kv["password"] == "" {
			return nil, errors.New("AuthenticationBasic needs userId and password")
		}
		return basicCredentials(kv["userId"] + ":" + kv["password"]), nil
	}
	return nil, fmt.Errorf("authenticationPlugin %q is not one Meridian's replication links implement (AuthenticationToken, AuthenticationTls, AuthenticationBasic)", plugin)
}

// tokenCredentials: "token:<jwt>", "file:///path" (read at every connection), {"token": "..."},
// or the token itself, as Pulsar's AuthenticationToken accepts.
func tokenCredentials(params string) (client.Credentials, error) {
	params = strings.TrimSpace(params)
	switch {
	case params == "":
		return nil, errors.New("AuthenticationToken needs authenticationParameters")
	case strings.HasPrefix(params, "token:"):
		return client.Token(strings.TrimPrefix(params, "token:")), nil
	case strings.HasPrefix(params, "file://"):
		return client.TokenFile(strings.TrimPrefix(params, "file://")), nil
	case strings.HasPrefix(params, "{"):
		var v struct{ Token string }
		if err := json.Unmarshal([]byte(params), &v); err != nil || v.Token == "" {
			return nil, errors.New("AuthenticationToken: authenticationParameters is JSON without a \"token\"")
		}
		return client.Token(v.Token), nil
	}
	return client.Token(params), nil
}

// pluginParams reads "k1:v1,k2:v2" or a JSON object of strings.
func pluginParams(params string) (map[string]string, error) {
	params = strings.TrimSpace(params)
	out := map[string]string{}
	if strings.HasPrefix(params, "{") {
		if err := json.Unmarshal([]byte(params), &out); err != nil {
			return nil, errors.New("authenticationParameters: malformed JSON")
		}
		return out, nil
	}
	for _, kv := range strings.Split(params, ",") {
		k, v, ok := strings.Cut(kv, ":")
		if !ok {
			return nil, errors.New("authenticationParameters: want key:value,key:value or JSON")
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, nil
}

// basicCredentials are "user:password" for method "basic".
type basicCredentials string

func (basicCredentials) Method() string          { return "basic" }
func (b basicCredentials) Data() ([]byte, error) { return []byte(b), nil }

// httpClient is the link's client for the remote's admin API: the link's TLS, and its token
// ("Bearer") or basic credentials on every request.
func (lc linkConfig) httpClient(base *http.Client) *http.Client {
	if lc.tls == nil && lc.creds == nil {
		return base
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if lc.tls != nil {
		tr.TLSClientConfig = lc.tls.Clone()
	}
	c := *base
	c.Transport = &credentialTransport{creds: lc.creds, next: tr}
	return &c
}

type credentialTransport struct {
	creds client.Credentials
	next  http.RoundTripper
}

func (t *credentialTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.creds != nil {
		data, err := t.creds.Data()
		if err != nil {
			return nil, err
		}
		switch t.creds.Method() {
		case "token":
			r = r.Clone(r.Context())
			r.Header.Set("Authorization", "Bearer "+string(data))
		case "basic":
			r = r.Clone(r.Context())
			r.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString(data))
		}
	}
	return t.next.RoundTrip(r)
}
