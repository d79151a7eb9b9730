package server

import (
	"crypto/tls"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/auth"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// errAuthenticationFailed closes a connection whose CONNECT did not authenticate.
var errAuthenticationFailed = errors.New("authentication failed")

// authenticate checks the credentials of CONNECT (auth_method_name, auth_data, the TLS client
// certificate) when Options.Authenticator is set. A failure is answered with ERROR
// AuthenticationError, logged with the method and the reason (never the credentials), and closes
// the connection. On success the identity is the connection's.
func (c *conn) authenticate(cmd *pulsarpb.CommandConnect) error {
	a := c.s.opts.Authenticator
	if a == nil {
		if m := cmd.GetAuthMethodName(); m != "" && m != "none" {
			// Accepting credentials silently would mislead: say once that they are not checked.
			c.log.Info("client sent credentials; authentication is not enabled, ignoring them", "method", clipText(m))
		}
		return nil
	}
	creds := auth.Credentials{Method: cmd.GetAuthMethodName(), Data: cmd.GetAuthData(), TLS: c.tlsState()}
	id, err := a.Authenticate(creds)
	if err != nil {
		return c.refuseAuthentication(creds.Method, err)
	}
	c.authMu.Lock()
	c.identity = id
	c.refresh = authRefresh{expiresAt: id.ExpiresAt, clientRefreshes: cmd.GetFeatureFlags().GetSupportsAuthRefresh(),
		protocolVersion: min(cmd.GetProtocolVersion(), wire.ProtocolVersion)}
	c.authMu.Unlock()
	c.log.Debug("client authenticated", "role", id.Role, "method", id.Method)
	return nil
}

// refuseAuthentication answers credentials that do not authenticate with ERROR
// AuthenticationError, logs the method and the reason (never the credentials), and returns the
// error that closes the connection.
func (c *conn) refuseAuthentication(method string, err error) error {
	c.s.stats.authFailures.Add(1)
	c.log.Info("closing connection: authentication failed", "method", clipText(method), "reason", err.Error())
	c.sendCommand(&pulsarpb.CommandError{
		RequestId: proto.Uint64(0),
		Error:     pulsarpb.ServerError_AuthenticationError.Enum(),
		Message:   proto.String("Unable to authenticate: " + err.Error()),
	})
	return fmt.Errorf("%w: %v", errAuthenticationFailed, err)
}

// tlsState is the connection's TLS state, nil on a plaintext connection.
func (c *conn) tlsState() *tls.ConnectionState {
	tc, ok := c.nc.(*tls.Conn)
	if !ok {
		return nil
	}
	st := tc.ConnectionState()
	return &st
}

// clipText shortens client-chosen text for a log line.
func clipText(s string) string {
	const max = 40
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}
