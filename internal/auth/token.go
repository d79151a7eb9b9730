package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/meridian-mq/meridian/internal/config"
)

// MaxTokenBytes bounds a token; longer ones are refused unread.
const MaxTokenBytes = 64 << 10

// TokenProvider authenticates JSON Web Tokens as Pulsar's AuthenticationProviderToken does: HS256
// signed with tokenSecretKey, or tokenPublicAlg (RS256, ES256, ...) verified with tokenPublicKey;
// any other algorithm (none included) is refused. exp and nbf are honoured when present (Pulsar's
// tokens need not expire); the role is the string claim tokenAuthClaim ("sub"); with tokenAudience
// set, the tokenAudienceClaim ("aud") must name it.
type TokenProvider struct {
	secret        []byte
	public        crypto.PublicKey
	publicAlg     string
	algs          []string
	roleClaim     string
	audienceClaim string
	audience      string
	now           func() time.Time
}

// NewTokenProvider reads the keys of the settings. Pulsar's key forms are accepted: the secret as
// raw bytes (file:// or data:;base64,), the public key as DER or PEM (PKIX, or PKCS#1 for RSA).
func NewTokenProvider(a config.Auth) (*TokenProvider, error) {
	p := &TokenProvider{roleClaim: a.TokenAuthClaim, audienceClaim: a.TokenAudienceClaim, audience: a.TokenAudience, now: time.Now}
	if p.roleClaim == "" {
		p.roleClaim = config.DefaultTokenAuthClaim
	}
	if p.audienceClaim == "" {
		p.audienceClaim = "aud"
	}
	if !a.TokenSecretKey.IsSet() && !a.TokenPublicKey.IsSet() {
		return nil, errors.New("AuthenticationProviderToken needs tokenSecretKey or tokenPublicKey")
	}
	if a.TokenSecretKey.IsSet() {
		secret, err := a.TokenSecretKey.Load()
		if err != nil {
			return nil, fmt.Errorf("tokenSecretKey %s: %w", a.TokenSecretKey, err)
		}
		if len(secret) < 32 {
			return nil, fmt.Errorf("tokenSecretKey %s: %d bytes; an HS256 key needs at least 32", a.TokenSecretKey, len(secret))
		}
		p.secret = secret
		p.algs = append(p.algs, "HS256")
	}
	if a.TokenPublicKey.IsSet() {
		der, err := a.TokenPublicKey.Load()
		if err != nil {
			return nil, fmt.Errorf("tokenPublicKey %s: %w", a.TokenPublicKey, err)
		}
		alg := a.TokenPublicAlg
		if alg == "" {
			alg = config.DefaultTokenPublicAlg
		}
		key, err := parsePublicKey(der, alg)
		if err != nil {
			return nil, fmt.Errorf("tokenPublicKey %s: %w", a.TokenPublicKey, err)
		}
		p.public, p.publicAlg = key, alg
		p.algs = append(p.algs, alg)
	}
	return p, nil
}

// parsePublicKey reads a public key in DER or PEM and checks it fits alg.
func parsePublicKey(data []byte, alg string) (crypto.PublicKey, error) {
	if block, _ := pem.Decode(data); block != nil {
		data = block.Bytes
	}
	key, err := x509.ParsePKIXPublicKey(data)
	if err != nil {
		rsaKey, err2 := x509.ParsePKCS1PublicKey(data)
		if err2 != nil {
			return nil, errors.New("not a public key (DER or PEM, PKIX or PKCS#1)")
		}
		key = rsaKey
	}
	switch key.(type) {
	case *rsa.PublicKey:
		if !strings.HasPrefix(alg, "RS") && !strings.HasPrefix(alg, "PS") {
			return nil, fmt.Errorf("an RSA key does not verify %s tokens (tokenPublicAlg)", alg)
		}
	case *ecdsa.PublicKey:
		if !strings.HasPrefix(alg, "ES") {
			return nil, fmt.Errorf("an EC key does not verify %s tokens (tokenPublicAlg)", alg)
		}
	default:
		return nil, fmt.Errorf("a %T is not an RSA or EC key", key)
	}
	return key, nil
}

// Method is "token".
func (p *TokenProvider) Method() string { return MethodToken }

// Algorithms are the JWT algorithms accepted.
func (p *TokenProvider) Algorithms() []string { return slices.Clone(p.algs) }

// Authenticate verifies the token in c.Data.
func (p *TokenProvider) Authenticate(c Credentials) (Identity, error) {
	if len(c.Data) == 0 {
		return Identity{}, fail("token: no token")
	}
	if len(c.Data) > MaxTokenBytes {
		return Identity{}, fail("token: longer than %d bytes", MaxTokenBytes)
	}
	claims := jwt.MapClaims{}
	_, err := jwt.ParseWithClaims(strings.TrimSpace(string(c.Data)), claims, p.key,
		jwt.WithValidMethods(p.algs), jwt.WithTimeFunc(p.now))
	if err != nil {
		return Identity{}, fail("token: %s", tokenErrorReason(err))
	}
	role, ok := claims[p.roleClaim].(string)
	if !ok || role == "" {
		return Identity{}, fail("token: no string claim %q holding the role", clip(p.roleClaim))
	}
	if p.audience != "" && !namesAudience(claims[p.audienceClaim], p.audience) {
		return Identity{}, fail("token: claim %q does not name this broker's audience", clip(p.audienceClaim))
	}
	id := Identity{Role: role}
	if exp, err := claims.GetExpirationTime(); err == nil && exp != nil {
		id.ExpiresAt = exp.Time
	}
	return id, nil
}

// key hands jwt the key of the token's algorithm (WithValidMethods has already refused others).
func (p *TokenProvider) key(t *jwt.Token) (any, error) {
	if t.Method.Alg() == "HS256" && p.secret != nil {
		return p.secret, nil
	}
	if p.public != nil && t.Method.Alg() == p.publicAlg {
		return p.public, nil
	}
	return nil, fmt.Errorf("algorithm %s is not accepted", t.Method.Alg())
}

// tokenErrorReason is a short reason for a verification failure, without the token.
func tokenErrorReason(err error) string {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "malformed"
	case errors.Is(err, jwt.ErrTokenExpired):
		return "expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return "not valid yet"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return "signature is invalid"
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return "unverifiable (algorithm not accepted)"
	default:
		return "invalid"
	}
}

// namesAudience reports whether an audience claim (a string or a list of strings) names want.
func namesAudience(claim any, want string) bool {
	switch v := claim.(type) {
	case string:
		return v == want
	case []any:
		for _, a := range v {
			if s, ok := a.(string); ok && s == want {
				return true
			}
		}
	}
	return false
}
