package node

import (
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/meridian-mq/meridian/internal/auth"
	"github.com/meridian-mq/meridian/internal/config"
)

// Authentication (docs/security.md): with Options.Auth.AuthenticationEnabled every CONNECT and
// every HTTP request is authenticated by internal/auth; the readiness endpoint stays open for
// probes, /metrics too unless AuthenticateMetricsEndpoint.

// validateAuth checks the authentication options against the listeners.
func (o *Options) validateAuth() []error {
	a := o.Auth
	if !a.AuthenticationEnabled {
		return nil
	}
	var errs []error
	if len(a.Providers) == 0 {
		errs = append(errs, errors.New("authenticationEnabled=true needs authenticationProviders"))
	}
	if slices.Contains(a.Providers, config.AuthProviderTLS) && (o.TLS.TrustCertsFile == "" || (o.BrokerTLSAddr == "" && o.WebTLSAddr == "")) {
		errs = append(errs, errors.New("AuthenticationProviderTls needs a TLS listener and tlsTrustCertsFilePath (--tls-trust-certs-file) to verify client certificates against"))
	}
	if slices.Contains(a.Providers, config.AuthProviderTLS) && o.TLS.AllowInsecureConnection {
		errs = append(errs, errors.New("AuthenticationProviderTls with tlsAllowInsecureConnection=true: unverified certificates prove nothing; turn one of them off"))
	}
	return errs
}

// buildAuthenticator reads the keys of the authentication providers (an error names the setting
// or file, never a key).
func (n *Node) buildAuthenticator() error {
	if !n.opts.Auth.AuthenticationEnabled {
		return nil
	}
	a, err := auth.New(n.opts.Auth)
	if err != nil {
		return fmt.Errorf("authentication: %w", err)
	}
	n.authn = a
	n.log.Info("authentication enabled", "methods", a.Methods(), "anonymousRole", n.opts.Auth.AnonymousUserRole != "",
		"metricsNeedCredentials", a.MetricsNeedCredentials())
	return nil
}

// webHandler is the web listeners' handler: the mux, behind authentication when it is on.
func (n *Node) webHandler() http.Handler {
	if n.authn == nil {
		return n.mux
	}
	metricsOpen := !n.authn.MetricsNeedCredentials()
	public := func(r *http.Request) bool {
		switch r.URL.Path {
		case "/admin/v2/brokers/ready":
			return true
		case "/metrics":
			return metricsOpen
		}
		return false
	}
	return n.authn.Middleware(n.mux, public, n.log.With("component", "auth"))
}
