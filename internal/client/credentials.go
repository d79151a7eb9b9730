package client

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
)

// Credentials are what the client presents to a broker that authenticates: Pulsar's
// auth_method_name and the method's data. Data is asked for at every CONNECT and every
// AUTH_CHALLENGE, so a source that rotates (a token file rewritten in place) keeps connections
// alive.
type Credentials interface {
	Method() string
	Data() ([]byte, error)
}

// Token is a fixed token (method "token").
type Token string

// Method implements Credentials.
func (Token) Method() string { return "token" }

// Data implements Credentials.
func (t Token) Data() ([]byte, error) { return []byte(t), nil }

// TokenFile reads the token from a file at every use (method "token").
type TokenFile string

// Method implements Credentials.
func (TokenFile) Method() string { return "token" }

// Data implements Credentials.
func (f TokenFile) Data() ([]byte, error) {
	b, err := os.ReadFile(string(f))
	if err != nil {
		return nil, fmt.Errorf("reading the token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return nil, fmt.Errorf("token file %s is empty", string(f))
	}
	return []byte(tok), nil
}

// TLSCertificate authenticates with the client certificate of Options.TLS (method "tls"; the
// broker takes the role from the certificate, the data is empty).
type TLSCertificate struct{}

// Method implements Credentials.
func (TLSCertificate) Method() string { return "tls" }

// Data implements Credentials.
func (TLSCertificate) Data() ([]byte, error) { return nil, nil }

// credentialsOf returns the method and data to send, ("", nil) without credentials. A failure to
// read them is an error that names no secret.
func credentialsOf(c Credentials) (string, []byte, error) {
	if c == nil {
		return "", nil, nil
	}
	data, err := c.Data()
	if err != nil {
		return "", nil, fmt.Errorf("client: credentials: %w", err)
	}
	return c.Method(), data, nil
}

// tlsFor is the TLS configuration of a connection to addr: o.TLS with ServerName the host of
// addr when it names none, so the broker's certificate is verified against the host dialed.
func tlsFor(o *Options, addr string) (*tls.Config, error) {
	if o.TLS == nil {
		return nil, errors.New("client: no TLS configuration")
	}
	cfg := o.TLS.Clone()
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("client: address %q: %w", addr, err)
		}
		cfg.ServerName = host
	}
	if cfg.MinVersion < tls.VersionTLS12 {
		cfg.MinVersion = tls.VersionTLS12
	}
	return cfg, nil
}
