package auth

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/meridian-mq/meridian/internal/config"
)

// The pulsar-client-go suite's .htpasswd: admin / 123456 (htpasswd -m).
const clientSuiteHtpasswd = "admin:$apr1$FG4AO6aX$KGYPuMoLUou3i6vUkPUUf.\n"

// TestMD5CryptKnownAnswers: Apache's $apr1$ and MD5-crypt $1$ hashes made by htpasswd and openssl.
func TestMD5CryptKnownAnswers(t *testing.T) {
	for _, tc := range []struct{ password, hash string }{
		{"123456", "$apr1$FG4AO6aX$KGYPuMoLUou3i6vUkPUUf."}, // pulsar-client-go integration-tests/conf/.htpasswd
		{"password", "$1$saltsalt$qjXMvbEw8oaL.CzflDtaK/"},  // openssl passwd -1 -salt saltsalt password
		{"", "$1$salt$UsdFqFVB.FsuinRDK5eE.."},              // openssl passwd -1 -salt salt ''
	} {
		magic, salt, ok := splitMD5Crypt(tc.hash)
		if !ok {
			t.Fatalf("%s: not split", tc.hash)
		}
		if got := md5Crypt([]byte(tc.password), []byte(salt), []byte(magic)); got != tc.hash {
			t.Errorf("md5Crypt(%q) = %s, want %s", tc.password, got, tc.hash)
		}
	}
}

// TestBasicProvider: the client suite's file authenticates admin/123456 (role admin); a wrong
// password, an unknown user and malformed credentials are refused; bcrypt entries work.
func TestBasicProvider(t *testing.T) {
	bc, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	a := config.DefaultAuth()
	a.BasicAuthConf, err = config.ParseKeySource("data:;base64," + base64.StdEncoding.EncodeToString([]byte("# users\n"+clientSuiteHtpasswd+"ops:"+string(bc)+"\n")))
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewBasicProvider(a)
	if err != nil {
		t.Fatal(err)
	}
	au := NewWith("", p)
	for creds, role := range map[string]string{"admin:123456": "admin", "ops:s3cret": "ops"} {
		if id, err := au.Authenticate(Credentials{Method: MethodBasic, Data: []byte(creds)}); err != nil || id.Role != role {
			t.Errorf("%s: %+v, %v", creds, id, err)
		}
	}
	for _, creds := range []string{"admin:hunter2", "nobody:123456", "admin", ":123456", "ops:"} {
		if _, err := au.Authenticate(Credentials{Method: MethodBasic, Data: []byte(creds)}); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("%q: %v, want refused", creds, err)
		} else if strings.Contains(err.Error(), "123456") || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%q: the error repeats the password: %v", creds, err)
		}
	}
}

// TestHtpasswdRefusals: hashes this build cannot verify, and malformed lines, stop the load with
// the line named and without the hash.
func TestHtpasswdRefusals(t *testing.T) {
	for text, want := range map[string]string{
		"old:rqXexS6ZhobKA\n":                     "line 1 (user \"old\"): only MD5",
		"sha:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\n": "only MD5",
		"plain:secret\n":                          "only MD5",
		"nocolon\n":                               "line 1 is not user:hash",
		"a:$apr1$salt$short\n":                    "malformed MD5",
		"a:$2y$10$tooshort\n":                     "malformed bcrypt",
		"a:$2y$15$abcdefghijklmnopqrstuu5vVnTQ2nDhl5Ci5SKQa0j0w0rrnLx6W\n": "bcrypt cost 15 is above 14",
		clientSuiteHtpasswd + clientSuiteHtpasswd:                          "listed twice",
	} {
		_, err := ParseHtpasswd([]byte(text))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error containing %q", text, err, want)
		}
		if err != nil && (strings.Contains(err.Error(), "rqXexS6ZhobKA") || strings.Contains(err.Error(), "W6ph5Mm5")) {
			t.Errorf("%q: the error repeats the hash", text)
		}
	}
}
