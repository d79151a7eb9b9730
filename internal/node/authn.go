package node

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/internal/admin"
	"github.com/meridian-mq/meridian/internal/auth"
	"github.com/meridian-mq/meridian/internal/config"
)

// Authentication (docs/security.md): with Options.Auth.AuthenticationEnabled every CONNECT and
// every HTTP request is authenticated by internal/auth; the readiness endpoint stays open for
// probes, /metrics too unless AuthenticateMetricsEndpoint.

// validateAuth checks the authentication and authorization options against the listeners.
func (o *Options) validateAuth() []error {
	a := o.Auth
	if a.AuthorizationEnabled && !a.AuthenticationEnabled {
		// Authorization decides on the authenticated role: without authentication there is none.
		return []error{errors.New("authorizationEnabled=true needs authenticationEnabled=true: authorization decides on the role a client authenticated as")}
	}
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

// Web listener timeouts: a request (headers and body, at most admin.DefaultMaxBodyBytes) must
// arrive within webReadTimeout; an idle keep-alive connection is closed after webIdleTimeout.
const (
	webReadTimeout = time.Minute
	webIdleTimeout = 2 * time.Minute
)

// buildAuthorizer builds the authorizer over the catalog when authorization is on: the binary
// server and the admin API (and the console) check every command and route with it.
func (n *Node) buildAuthorizer() {
	if !n.opts.Auth.AuthorizationEnabled {
		return
	}
	n.authz = auth.NewAuthorizer(n.opts.Auth.SuperUserRoles, admin.CatalogPolicies{Catalog: n.components.catalog})
	n.log.Info("authorization enabled", "superUserRoles", len(n.opts.Auth.SuperUserRoles))
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
		// The console's page and its assets (its API is not public).
		return strings.HasPrefix(r.URL.Path, "/console/") && !strings.HasPrefix(r.URL.Path, "/console/api/")
	}
	return n.authn.Middleware(n.mux, public, n.log.With("component", "auth"))
}
