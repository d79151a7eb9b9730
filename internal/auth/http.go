package auth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
)

type identityKey struct{}

// WithIdentity returns ctx carrying id.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// IdentityFrom returns the identity an authenticated request or connection carries.
func IdentityFrom(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}

// HTTPCredentials are the credentials of an HTTP request: "Authorization: Bearer <token>" or
// "Authorization: Basic <base64 user:password>", or else the verified TLS client certificate when the tls method is enabled, or none.
func (a *Authenticator) HTTPCredentials(r *http.Request) Credentials {
	c := Credentials{TLS: r.TLS}
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, value, _ := strings.Cut(h, " ")
		switch strings.ToLower(scheme) {
		case "bearer":
			c.Method, c.Data = MethodToken, []byte(strings.TrimSpace(value))
		case "basic":
			c.Method = MethodBasic
			if raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(value)); err == nil {
				c.Data = raw // not user:password when it does not decode: refused by the provider
			}
		default:
			c.Method = strings.ToLower(scheme) // e.g. "basic": refused unless enabled
		}
		return c
	}
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 && a.Enabled(MethodTLS) {
		c.Method = MethodTLS
	}
	return c
}

// Middleware authenticates every request except those public says need none, and answers 401
// (with Pulsar's {"reason": ...} body) to missing or invalid credentials. The identity travels in
// the request's context (IdentityFrom). Failures are logged without the credentials.
func (a *Authenticator) Middleware(next http.Handler, public func(*http.Request) bool, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if public != nil && public(r) {
			next.ServeHTTP(w, r)
			return
		}
		id, err := a.Authenticate(a.HTTPCredentials(r))
		if err != nil {
			log.Info("HTTP request refused: authentication failed", "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path, "reason", err.Error())
			w.Header().Set("WWW-Authenticate", `Bearer realm="meridian"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(map[string]string{"reason": "Authentication required: " + err.Error()})
			return
		}
		next.ServeHTTP(w, r.WithContext(WithIdentity(r.Context(), id)))
	})
}

// MetricsNeedCredentials reports whether /metrics is authenticated (authenticateMetricsEndpoint).
func (a *Authenticator) MetricsNeedCredentials() bool { return a.metricsNeedCredentials }
