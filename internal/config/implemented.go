package config

import (
	"errors"
	"fmt"
	"slices"
)

// implementedProviders are the authentication providers this build has (internal/auth).
var implementedProviders = []AuthProvider{AuthProviderToken, AuthProviderTLS, AuthProviderBasic}

// RefuseUnimplemented returns an error for every security setting whose value asks for something
// this build reads but does not do, so that a broker never runs more open than its configuration
// says: authorization, an authentication provider it does not have, TLS and credentials on
// replication links. Settings that only matter once one of those is on (superUserRoles, ...) are
// accepted and have no effect, as Pulsar treats them with the feature off.
func (s *Settings) RefuseUnimplemented() error {
	var errs []error
	if s.Auth.AuthenticationEnabled {
		if len(s.Auth.Providers) == 0 {
			errs = append(errs, errors.New("authenticationEnabled=true needs authenticationProviders (AuthenticationProviderToken, AuthenticationProviderTls, AuthenticationProviderBasic)"))
		}
		for _, p := range s.Auth.Providers {
			if !slices.Contains(implementedProviders, p) {
				errs = append(errs, fmt.Errorf("authenticationProviders: %s is not implemented by this build; the broker would refuse clients that use it", p))
			}
		}
		if slices.Contains(s.Auth.Providers, AuthProviderToken) && !s.Auth.TokenSecretKey.IsSet() && !s.Auth.TokenPublicKey.IsSet() {
			errs = append(errs, errors.New("AuthenticationProviderToken needs tokenSecretKey or tokenPublicKey"))
		}
		if slices.Contains(s.Auth.Providers, AuthProviderBasic) && !s.Auth.BasicAuthConf.IsSet() {
			errs = append(errs, errors.New("AuthenticationProviderBasic needs basicAuthConf (an htpasswd file)"))
		}
	}
	if s.Auth.AuthorizationEnabled {
		errs = append(errs, errors.New("authorizationEnabled=true: authorization is not implemented by this build; the broker would allow every authenticated client every operation"))
	}
	if s.BrokerClient.TLSEnabled {
		errs = append(errs, errors.New("brokerClientTlsEnabled=true: replication links over TLS are not implemented by this build"))
	}
	if s.BrokerClient.AuthenticationPlugin != "" {
		errs = append(errs, errors.New("brokerClientAuthenticationPlugin is set: replication links with credentials are not implemented by this build"))
	}
	return errors.Join(errs...)
}
