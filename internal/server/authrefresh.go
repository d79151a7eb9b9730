package server

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/auth"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// Credentials that expire during a connection, as Pulsar handles them: every
// Options.AuthRefreshInterval the connection's credentials are checked; once expired, a client that
// supports it gets AUTH_CHALLENGE and must answer with valid credentials of the same role (an
// AUTH_RESPONSE) before the next check, or the connection is closed. A client that does not
// support refresh is closed at the first check after its credentials expired.

// refreshChallengeData is what Pulsar's brokers put into an AUTH_CHALLENGE that asks for fresh
// credentials.
var refreshChallengeData = []byte("PulsarAuthRefresh")

// authRefreshAction is what authRefresh.check asks for.
type authRefreshAction int

const (
	authRefreshNothing authRefreshAction = iota
	authRefreshChallenge
	authRefreshClose
)

// authRefresh is the expiry state of one connection's credentials. It decides; the connection
// acts. Not safe for concurrent use (conn.authMu guards it).
type authRefresh struct {
	expiresAt       time.Time // zero: the credentials do not expire
	clientRefreshes bool      // CONNECT said supports_auth_refresh
	challenged      bool      // an AUTH_CHALLENGE is outstanding
	protocolVersion int32     // the connection's, for AUTH_CHALLENGE
}

// check runs at each refresh check.
func (r *authRefresh) check(now time.Time) authRefreshAction {
	switch {
	case r.expiresAt.IsZero() || now.Before(r.expiresAt):
		return authRefreshNothing
	case !r.clientRefreshes || r.challenged:
		return authRefreshClose
	default:
		r.challenged = true
		return authRefreshChallenge
	}
}

// refreshed takes the expiry of the credentials of an accepted AUTH_RESPONSE.
func (r *authRefresh) refreshed(expiresAt time.Time) {
	r.expiresAt = expiresAt
	r.challenged = false
}

// checkCredentials is the periodic check (from keepAliveLoop). It returns false when it closed the
// connection.
func (c *conn) checkCredentials(now time.Time) bool {
	c.authMu.Lock()
	action := c.refresh.check(now)
	method, role, version := c.identity.Method, c.identity.Role, c.refresh.protocolVersion
	c.authMu.Unlock()
	switch action {
	case authRefreshChallenge:
		c.log.Debug("credentials expired; challenging the client", "role", role, "method", method)
		c.sendCommand(&pulsarpb.CommandAuthChallenge{
			ServerVersion:   proto.String(ServerVersion),
			Challenge:       &pulsarpb.AuthData{AuthMethodName: proto.String(method), AuthData: refreshChallengeData},
			ProtocolVersion: proto.Int32(version),
		})
	case authRefreshClose:
		c.s.stats.authFailures.Add(1)
		c.log.Info("closing connection: credentials expired and were not refreshed", "role", role, "method", method)
		c.abort(fmt.Errorf("%w: credentials expired", errAuthenticationFailed))
		return false
	}
	return true
}

// handleAuthResponse takes fresh credentials. They must authenticate, with the connection's method
// and as its role; anything else closes the connection with ERROR AuthenticationError.
func (c *conn) handleAuthResponse(cmd *pulsarpb.CommandAuthResponse) error {
	a := c.s.opts.Authenticator
	resp := cmd.GetResponse()
	creds := auth.Credentials{Method: resp.GetAuthMethodName(), Data: resp.GetAuthData(), TLS: c.tlsState()}
	id, err := a.Authenticate(creds)
	c.authMu.Lock()
	prev := c.identity
	if err == nil && (id.Role != prev.Role || id.Method != prev.Method) {
		err = fmt.Errorf("the refreshed credentials are for %s role %q, the connection's for %s role %q", id.Method, id.Role, prev.Method, prev.Role)
	}
	if err == nil {
		c.identity = id
		c.refresh.refreshed(id.ExpiresAt)
	}
	c.authMu.Unlock()
	if err != nil {
		return c.refuseAuthentication(creds.Method, err)
	}
	c.log.Debug("credentials refreshed", "role", id.Role, "method", id.Method, "expiresAt", id.ExpiresAt)
	return nil
}
