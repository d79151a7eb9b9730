package config

import (
	"errors"
)

// RefuseUnimplemented returns an error for every security setting whose value asks for something
// this build reads but does not do, so that a broker never runs more open than its configuration
// says: authentication, authorization, TLS and credentials on replication links. Settings that
// only matter once one of those is on (superUserRoles, the token keys, ...) are accepted as
// inert, as Pulsar treats them with authentication off.
func (s *Settings) RefuseUnimplemented() error {
	var errs []error
	if s.Auth.AuthenticationEnabled {
		errs = append(errs, errors.New("authenticationEnabled=true: authentication is not implemented by this build; the broker would accept every client"))
	}
	if s.Auth.AuthorizationEnabled {
		errs = append(errs, errors.New("authorizationEnabled=true: authorization is not implemented by this build; the broker would allow every operation"))
	}
	if s.BrokerClient.TLSEnabled {
		errs = append(errs, errors.New("brokerClientTlsEnabled=true: replication links over TLS are not implemented by this build"))
	}
	if s.BrokerClient.AuthenticationPlugin != "" {
		errs = append(errs, errors.New("brokerClientAuthenticationPlugin is set: replication links with credentials are not implemented by this build"))
	}
	return errors.Join(errs...)
}
