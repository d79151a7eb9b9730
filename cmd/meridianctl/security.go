package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/meridian-mq/meridian/internal/client"
)

// securityFlags are how meridianctl authenticates and verifies the broker: a token (Pulsar's
// token authentication, sent as "Authorization: Bearer" and in CONNECT), the CA that signed the
// broker's certificate, and a client certificate for mutual TLS. Each has an environment
// variable; a flag overrides it.
type securityFlags struct {
	authToken, authTokenFile string
	trustCerts               string
	certFile, keyFile        string
	allowInsecure            bool
}

func (s *securityFlags) register(pf *pflag.FlagSet, env func(string) (string, bool)) {
	pf.StringVar(&s.authToken, "auth-token", envOr(env, "MERIDIAN_AUTH_TOKEN", ""), "token to authenticate with (env MERIDIAN_AUTH_TOKEN); prefer --auth-token-file, a flag is visible to other local users")
	pf.StringVar(&s.authTokenFile, "auth-token-file", envOr(env, "MERIDIAN_AUTH_TOKEN_FILE", ""), "file holding the token, read at each request (env MERIDIAN_AUTH_TOKEN_FILE)")
	pf.StringVar(&s.trustCerts, "tls-trust-certs", envOr(env, "MERIDIAN_TLS_TRUST_CERTS", ""), "PEM file of the CA certificates that verify the broker (https:// and pulsar+ssl://; default: the system's) (env MERIDIAN_TLS_TRUST_CERTS)")
	pf.StringVar(&s.certFile, "tls-cert-file", envOr(env, "MERIDIAN_TLS_CERT_FILE", ""), "client certificate for mutual TLS (env MERIDIAN_TLS_CERT_FILE)")
	pf.StringVar(&s.keyFile, "tls-key-file", envOr(env, "MERIDIAN_TLS_KEY_FILE", ""), "key of --tls-cert-file (env MERIDIAN_TLS_KEY_FILE)")
	insecure := envOr(env, "MERIDIAN_TLS_ALLOW_INSECURE", "") == "true"
	pf.BoolVar(&s.allowInsecure, "tls-allow-insecure", insecure, "do not verify the broker's certificate (tests only) (env MERIDIAN_TLS_ALLOW_INSECURE=true)")
}

// token returns the token to send, "" for none.
func (s *securityFlags) token() (string, error) {
	if s.authToken != "" && s.authTokenFile != "" {
		return "", usageErr("give --auth-token or --auth-token-file, not both")
	}
	if s.authTokenFile == "" {
		return strings.TrimSpace(s.authToken), nil
	}
	b, err := os.ReadFile(s.authTokenFile)
	if err != nil {
		return "", fmt.Errorf("reading --auth-token-file: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// tlsConfig is the client TLS configuration of the flags (TLS 1.2 minimum).
func (s *securityFlags) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: s.allowInsecure} //nolint:gosec // only with --tls-allow-insecure
	if s.trustCerts != "" {
		pem, err := os.ReadFile(s.trustCerts)
		if err != nil {
			return nil, fmt.Errorf("reading --tls-trust-certs: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-trust-certs %s holds no PEM certificate", s.trustCerts)
		}
		cfg.RootCAs = pool
	}
	if (s.certFile == "") != (s.keyFile == "") {
		return nil, usageErr("--tls-cert-file and --tls-key-file go together")
	}
	if s.certFile != "" {
		pair, err := tls.LoadX509KeyPair(s.certFile, s.keyFile)
		if err != nil {
			return nil, fmt.Errorf("loading the client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// transport is the admin client's transport: the flags' TLS, and the token on every request.
func (s *securityFlags) transport() (http.RoundTripper, error) {
	cfg, err := s.tlsConfig()
	if err != nil {
		return nil, err
	}
	if _, err := s.token(); err != nil {
		return nil, err
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.TLSClientConfig = cfg
	return &bearerTransport{flags: s, next: base}, nil
}

// bearerTransport adds "Authorization: Bearer <token>" when a token is configured.
type bearerTransport struct {
	flags *securityFlags
	next  http.RoundTripper
}

func (b *bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	tok, err := b.flags.token()
	if err != nil {
		return nil, err
	}
	if tok != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+tok)
	}
	return b.next.RoundTrip(r)
}

// clientSecurity is the binary-protocol client's TLS (for a pulsar+ssl:// URL) and credentials
// (the token, read at each CONNECT and challenge when it comes from a file).
func (s *securityFlags) clientSecurity(serviceURL string) (*tls.Config, client.Credentials, error) {
	var cfg *tls.Config
	if strings.HasPrefix(serviceURL, "pulsar+ssl://") {
		var err error
		if cfg, err = s.tlsConfig(); err != nil {
			return nil, nil, err
		}
	}
	tok, err := s.token()
	if err != nil {
		return nil, nil, err
	}
	switch {
	case s.authTokenFile != "":
		return cfg, client.TokenFile(s.authTokenFile), nil
	case tok != "":
		return cfg, client.Token(tok), nil
	}
	return cfg, nil, nil
}
