package auth

import (
	"encoding/base64"
	"errors"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/meridian-mq/meridian/internal/config"
)

// FuzzAuthenticate: whatever a client sends as credentials (any method, any bytes) and whatever an
// htpasswd file holds, authentication answers an identity or an authentication failure, never a
// panic; only a correctly signed token or a matching password authenticates.
func FuzzAuthenticate(f *testing.F) {
	tok, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "app"}).SignedString(secret)
	f.Add("token", []byte(tok), []byte(clientSuiteHtpasswd))
	f.Add("token", []byte("eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0."), []byte(""))
	f.Add("basic", []byte("admin:123456"), []byte(clientSuiteHtpasswd))
	f.Add("basic", []byte("admin:"), []byte("admin:$2y$04$abcdefghijklmnopqrstuu5vVnTQ2nDhl5Ci5SKQa0j0w0rrnLx6W\n"))
	f.Add("tls", []byte(nil), []byte("x"))
	f.Add("", []byte(nil), []byte("#\n"))
	f.Fuzz(func(t *testing.T, method string, data, htpasswd []byte) {
		a := config.DefaultAuth()
		a.TokenSecretKey, _ = config.ParseKeySource("data:;base64," + base64.StdEncoding.EncodeToString(secret))
		tp, err := NewTokenProvider(a)
		if err != nil {
			t.Fatal(err)
		}
		providers := []Provider{tp, TLSProvider{}}
		if bp, err := ParseHtpasswd(htpasswd); err == nil {
			providers = append(providers, bp)
		}
		id, err := NewWith("", providers...).Authenticate(Credentials{Method: method, Data: data})
		if err != nil {
			if !errors.Is(err, ErrUnauthenticated) {
				t.Fatalf("error %v is not an authentication failure", err)
			}
			return
		}
		if id.Role == "" {
			t.Fatalf("identity without a role: %+v", id)
		}
	})
}
