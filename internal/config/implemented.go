package config

import (
	"errors"
	"fmt"
	"slices"
)

// implementedProviders are the authentication providers this build has (internal/auth).
var implementedProviders = []AuthProvider{AuthProviderToken, AuthProviderTLS, AuthProviderBasic}

// implementedClientPlugins are the Pulsar client authentication plugins Meridian's outgoing links
// present (brokerClientAuthenticationPlugin, and a cluster's authenticationPlugin): class names
// and the short names Pulsar's clients also accept.
var implementedClientPlugins = []string{
	"org.apache.pulsar.client.impl.auth.AuthenticationToken", "token",
	"org.apache.pulsar.client.impl.auth.AuthenticationTls", "tls",
	"org.apache.pulsar.client.impl.auth.AuthenticationBasic", "basic",
}

// RefuseUnimplemented returns an error for every security setting whose value asks for something
// this build reads but does not do, so that a broker never runs more open than its configuration
// says: an authentication provider it does not have, or credentials for outgoing links
// (brokerClientAuthenticationPlugin) in a form its links cannot present. Whether the brokerClient*
// files and parameters can be used is checked when the node's options are validated. Settings that only matter once one of those is on (superUserRoles, ...) are
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
	if p := s.BrokerClient.AuthenticationPlugin; p != "" && !slices.Contains(implementedClientPlugins, p) {
		errs = append(errs, fmt.Errorf("brokerClientAuthenticationPlugin: %s is not implemented by this build's outgoing links (AuthenticationToken, AuthenticationTls, AuthenticationBasic); links would replicate without the credentials the file names", p))
	}
	return errors.Join(errs...)
}
