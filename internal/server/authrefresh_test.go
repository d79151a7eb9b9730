package server

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// TestAuthRefreshDecisions: nothing before expiry or without one; at the first check after expiry
// a challenge for a client that refreshes, else closing; closing at the next check when the
// challenge was not answered; an answer resets it.
func TestAuthRefreshDecisions(t *testing.T) {
	t0 := time.Unix(1000, 0)
	never := authRefresh{clientRefreshes: true}
	if got := never.check(t0); got != authRefreshNothing {
		t.Errorf("no expiry: %v", got)
	}
	r := authRefresh{expiresAt: t0.Add(time.Minute), clientRefreshes: true}
	for i, want := range []struct {
		at   time.Time
		want authRefreshAction
	}{
		{t0, authRefreshNothing},
		{t0.Add(time.Minute), authRefreshChallenge},
		{t0.Add(2 * time.Minute), authRefreshClose},
	} {
		if got := r.check(want.at); got != want.want {
			t.Errorf("check %d: %v, want %v", i, got, want.want)
		}
	}
	r = authRefresh{expiresAt: t0, clientRefreshes: true}
	if got := r.check(t0); got != authRefreshChallenge {
		t.Fatalf("expired: %v", got)
	}
	r.refreshed(t0.Add(time.Hour))
	if got := r.check(t0.Add(time.Minute)); got != authRefreshNothing {
		t.Errorf("after a refresh: %v", got)
	}
	old := authRefresh{expiresAt: t0}
	if got := old.check(t0.Add(time.Second)); got != authRefreshClose {
		t.Errorf("a client without refresh support: %v", got)
	}
}

func connectRefreshing(c *rawClient, token string, refreshes bool) {
	c.send(&pulsarpb.CommandConnect{
		ClientVersion: proto.String("raw-test"), ProtocolVersion: proto.Int32(20),
		AuthMethodName: proto.String("token"), AuthData: []byte(token),
		FeatureFlags: &pulsarpb.FeatureFlags{SupportsAuthRefresh: proto.Bool(refreshes)},
	})
}

func authResponse(c *rawClient, token string) {
	c.send(&pulsarpb.CommandAuthResponse{
		ClientVersion: proto.String("raw-test"), ProtocolVersion: proto.Int32(20),
		Response: &pulsarpb.AuthData{AuthMethodName: proto.String("token"), AuthData: []byte(token)},
	})
}

// soon is a token of sub that expires in one to two seconds (exp has a resolution of seconds):
// valid for at least a second after it is made.
func soon(t *testing.T, sub string) string {
	return testToken(t, testSecret, jwt.MapClaims{"sub": sub, "exp": time.Now().Add(2 * time.Second).Unix()})
}

// TestAuthChallengeAndResponse: a connection whose token expires gets AUTH_CHALLENGE; a valid
// AUTH_RESPONSE keeps it open (it is challenged again when the new token expires); a challenge left
// unanswered closes it at the next check.
func TestAuthChallengeAndResponse(t *testing.T) {
	s := startServer(t, Options{Authenticator: tokenAuthenticator(t, ""), AuthRefreshInterval: time.Second}) // the client has a second to answer a challenge
	c := dialRaw(t, s.addr)
	connectRefreshing(c, soon(t, "app"), true)
	if !c.expect(pulsarpb.BaseCommand_CONNECTED).Cmd.GetConnected().GetFeatureFlags().GetSupportsAuthRefresh() {
		t.Error("CONNECTED does not say the broker refreshes credentials")
	}
	ch := c.expect(pulsarpb.BaseCommand_AUTH_CHALLENGE).Cmd.GetAuthChallenge()
	if ch.GetChallenge().GetAuthMethodName() != "token" || string(ch.GetChallenge().GetAuthData()) != "PulsarAuthRefresh" {
		t.Errorf("challenge %v", ch)
	}
	authResponse(c, soon(t, "app"))
	c.send(&pulsarpb.CommandPing{})
	c.expect(pulsarpb.BaseCommand_PONG)
	c.expect(pulsarpb.BaseCommand_AUTH_CHALLENGE) // the refreshed token expired in turn
	c.expectClosed()                              // and this challenge is not answered
	if s.Stats().AuthenticationFailures != 1 {
		t.Errorf("AuthenticationFailures = %d, want 1", s.Stats().AuthenticationFailures)
	}
}

// TestAuthRefreshRefusals: a client without refresh support is closed once its token expired;
// an AUTH_RESPONSE for another role, or with an invalid token, gets ERROR AuthenticationError and
// the connection closes.
func TestAuthRefreshRefusals(t *testing.T) {
	s := startServer(t, Options{Authenticator: tokenAuthenticator(t, ""), AuthRefreshInterval: time.Second}) // the client has a second to answer a challenge

	old := dialRaw(t, s.addr)
	connectRefreshing(old, soon(t, "app"), false)
	old.expect(pulsarpb.BaseCommand_CONNECTED)
	old.expectClosed()

	for name, token := range map[string]string{
		"another role":  testToken(t, testSecret, jwt.MapClaims{"sub": "admin"}),
		"invalid token": testToken(t, []byte("another-secret-another-secret-32"), jwt.MapClaims{"sub": "app"}),
	} {
		c := dialRaw(t, s.addr)
		connectRefreshing(c, soon(t, "app"), true)
		c.expect(pulsarpb.BaseCommand_CONNECTED)
		c.expect(pulsarpb.BaseCommand_AUTH_CHALLENGE)
		authResponse(c, token)
		if e := c.expect(pulsarpb.BaseCommand_ERROR).Cmd.GetError(); e.GetError() != pulsarpb.ServerError_AuthenticationError {
			t.Errorf("%s: %v", name, e)
		}
		c.expectClosed()
	}
}
