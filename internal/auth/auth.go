// Package auth authenticates clients: it turns the credentials a client presents (a token or a
// password in CONNECT or in an HTTP Authorization header, a TLS client certificate) into an
// Identity whose Role is what authorization decides on. Each way of authenticating is a Provider,
// named by the method Pulsar clients send ("token", "tls", "basic"); an Authenticator holds the
// providers a broker enables and the role of clients without credentials (Pulsar's
// anonymousUserRole). docs/security.md.
//
// The package never logs or returns a credential: errors say what is wrong ("token expired",
// "signature is invalid"), never with the token or key.
//
// It imports only the standard library, internal/config (the settings), golang-jwt and
// x/crypto's bcrypt.
package auth

import (
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/internal/config"
)

// Method names: Pulsar's auth_method_name values (MethodBasic is in basic.go).
const (
	MethodToken = "token"
	MethodTLS   = "tls"
	// MethodAnonymous is the method of an Identity given to a client without credentials.
	MethodAnonymous = "anonymous"
)

// Credentials are what a client presents.
type Credentials struct {
	// Method is Pulsar's auth_method_name ("token", "tls"); empty or "none" for no credentials.
	Method string
	// Data is the method's data: the token for "token".
	Data []byte
	// TLS is the state of the client's TLS connection, nil for a plaintext one.
	TLS *tls.ConnectionState
}

// Identity is an authenticated client.
type Identity struct {
	// Role is the principal authorization decides on.
	Role string
	// Method is the provider that authenticated it (or MethodAnonymous).
	Method string
	// ExpiresAt is when the credentials stop being valid; zero for never.
	ExpiresAt time.Time
}

// Provider authenticates one method.
type Provider interface {
	// Method is the auth_method_name this provider serves.
	Method() string
	// Authenticate checks the credentials (whose Method is this provider's) and returns the
	// identity, or an error that names no secret.
	Authenticate(c Credentials) (Identity, error)
}

// ErrUnauthenticated is the class of every authentication failure (errors.Is).
var ErrUnauthenticated = errors.New("authentication failed")

// failure is an authentication failure with its reason.
type failure struct{ reason string }

func (f *failure) Error() string        { return f.reason }
func (f *failure) Is(target error) bool { return target == ErrUnauthenticated }

// fail builds an authentication failure; the reason must not contain a credential.
func fail(format string, args ...any) error { return &failure{reason: fmt.Sprintf(format, args...)} }

// Authenticator authenticates with the providers a broker enables. Safe for concurrent use.
type Authenticator struct {
	providers     map[string]Provider
	anonymousRole string
	// metricsNeedCredentials: /metrics is authenticated too (authenticateMetricsEndpoint).
	metricsNeedCredentials bool
}

// New builds the Authenticator of the settings: one provider per class in a.Providers, keys read
// now (an error names the setting or the file, never the key). Providers this build does not
// implement are refused.
func New(a config.Auth) (*Authenticator, error) {
	if !a.AuthenticationEnabled {
		return nil, errors.New("auth: authentication is not enabled")
	}
	if len(a.Providers) == 0 {
		return nil, errors.New("authenticationEnabled=true needs authenticationProviders (AuthenticationProviderToken, AuthenticationProviderTls, AuthenticationProviderBasic)")
	}
	au := &Authenticator{providers: map[string]Provider{}, anonymousRole: a.AnonymousUserRole, metricsNeedCredentials: a.AuthenticateMetricsEndpoint}
	var errs []error
	for _, class := range a.Providers {
		var p Provider
		var err error
		switch class {
		case config.AuthProviderToken:
			p, err = NewTokenProvider(a)
		case config.AuthProviderTLS:
			p = TLSProvider{}
		case config.AuthProviderBasic:
			p, err = NewBasicProvider(a)
		default:
			err = fmt.Errorf("authenticationProviders: %s is not implemented by this build", class)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		au.providers[p.Method()] = p
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return au, nil
}

// NewWith builds an Authenticator from providers (tests and embedding).
func NewWith(anonymousRole string, providers ...Provider) *Authenticator {
	au := &Authenticator{providers: map[string]Provider{}, anonymousRole: anonymousRole}
	for _, p := range providers {
		au.providers[p.Method()] = p
	}
	return au
}

// Methods are the enabled methods, sorted.
func (a *Authenticator) Methods() []string {
	var out []string
	for m := range a.providers {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// Authenticate returns the identity of the credentials: the provider of their method decides;
// without credentials the anonymous role is given when configured.
func (a *Authenticator) Authenticate(c Credentials) (Identity, error) {
	method := strings.TrimSpace(c.Method)
	if method == "" || method == "none" {
		if a.anonymousRole != "" {
			return Identity{Role: a.anonymousRole, Method: MethodAnonymous}, nil
		}
		return Identity{}, fail("credentials are required (methods: %s)", strings.Join(a.Methods(), ", "))
	}
	p := a.providers[method]
	if p == nil {
		return Identity{}, fail("authentication method %q is not enabled (methods: %s)", clip(method), strings.Join(a.Methods(), ", "))
	}
	id, err := p.Authenticate(c)
	if err != nil {
		if !errors.Is(err, ErrUnauthenticated) {
			err = fail("%s: %v", method, err)
		}
		return Identity{}, err
	}
	if id.Role == "" {
		return Identity{}, fail("%s: the credentials name no role", method)
	}
	id.Method = method
	return id, nil
}

// Enabled reports whether method has a provider.
func (a *Authenticator) Enabled(method string) bool { return slices.Contains(a.Methods(), method) }

// clip shortens client-chosen text quoted in an error or log.
func clip(s string) string {
	const max = 40
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}
