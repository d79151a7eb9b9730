package auth

import (
	"bytes"
	"crypto/md5"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/bcrypt"

	"github.com/meridian-mq/meridian/internal/config"
)

// MethodBasic is the method of user:password credentials.
const MethodBasic = "basic"

// MaxBcryptCost bounds the cost of a bcrypt hash in an htpasswd file: a check at cost 14 takes
// about a second of CPU, and every CONNECT and HTTP request with basic credentials makes one.
const MaxBcryptCost = 14

// BasicProvider authenticates user:password against an htpasswd file, as Pulsar's
// AuthenticationProviderBasic does: the role is the user name. Hashes in Apache's MD5 format
// ($apr1$, what `htpasswd -m` writes), MD5-crypt ($1$) and bcrypt ($2a$, $2b$, $2y$: `htpasswd -B`)
// are verified; a file with other hashes (DES crypt, {SHA}, plain text) is refused when loaded. The
// file is read once, at startup.
type BasicProvider struct {
	users map[string]string // user -> hash
}

// NewBasicProvider loads the htpasswd file of basicAuthConf. Errors name the line, never a hash.
func NewBasicProvider(a config.Auth) (*BasicProvider, error) {
	if !a.BasicAuthConf.IsSet() {
		return nil, errors.New("AuthenticationProviderBasic needs basicAuthConf (an htpasswd file)")
	}
	data, err := a.BasicAuthConf.Load()
	if err != nil {
		return nil, fmt.Errorf("basicAuthConf %s: %w", a.BasicAuthConf, err)
	}
	p, err := ParseHtpasswd(data)
	if err != nil {
		return nil, fmt.Errorf("basicAuthConf %s: %w", a.BasicAuthConf, err)
	}
	return p, nil
}

// ParseHtpasswd reads "user:hash" lines; blank lines and lines starting with '#' are skipped.
func ParseHtpasswd(data []byte) (*BasicProvider, error) {
	p := &BasicProvider{users: map[string]string{}}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		user, hash, ok := strings.Cut(line, ":")
		if !ok || user == "" || hash == "" {
			return nil, fmt.Errorf("line %d is not user:hash", i+1)
		}
		switch {
		case strings.HasPrefix(hash, "$apr1$"), strings.HasPrefix(hash, "$1$"):
			if _, _, ok := splitMD5Crypt(hash); !ok {
				return nil, fmt.Errorf("line %d (user %q): a malformed MD5 hash", i+1, clip(user))
			}
		case strings.HasPrefix(hash, "$2a$"), strings.HasPrefix(hash, "$2b$"), strings.HasPrefix(hash, "$2y$"):
			cost, err := bcrypt.Cost([]byte(hash))
			if err != nil {
				return nil, fmt.Errorf("line %d (user %q): a malformed bcrypt hash", i+1, clip(user))
			}
			if cost > MaxBcryptCost {
				return nil, fmt.Errorf("line %d (user %q): bcrypt cost %d is above %d: every CONNECT and HTTP request would spend seconds of CPU on it", i+1, clip(user), cost, MaxBcryptCost)
			}
		default:
			return nil, fmt.Errorf("line %d (user %q): only MD5 ($apr1$, $1$: htpasswd -m) and bcrypt ($2y$: htpasswd -B) hashes are supported", i+1, clip(user))
		}
		if _, dup := p.users[user]; dup {
			return nil, fmt.Errorf("line %d: user %q is listed twice", i+1, clip(user))
		}
		p.users[user] = hash
	}
	return p, nil
}

// Method is "basic".
func (p *BasicProvider) Method() string { return MethodBasic }

// Authenticate checks "user:password" in c.Data.
func (p *BasicProvider) Authenticate(c Credentials) (Identity, error) {
	user, password, ok := bytes.Cut(c.Data, []byte(":"))
	if !ok || len(user) == 0 {
		return Identity{}, fail("basic: credentials are not user:password")
	}
	hash, known := p.users[string(user)]
	if !known || !verifyHash(hash, password) {
		return Identity{}, fail("basic: unknown user or wrong password")
	}
	return Identity{Role: string(user)}, nil
}

func verifyHash(hash string, password []byte) bool {
	if strings.HasPrefix(hash, "$2") {
		return bcrypt.CompareHashAndPassword([]byte(hash), password) == nil
	}
	magic, salt, ok := splitMD5Crypt(hash)
	if !ok {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(md5Crypt(password, []byte(salt), []byte(magic))), []byte(hash)) == 1
}

// splitMD5Crypt splits "$apr1$salt$digest" (or "$1$...") into its magic and salt.
func splitMD5Crypt(hash string) (magic, salt string, ok bool) {
	for _, m := range []string{"$apr1$", "$1$"} {
		if rest, found := strings.CutPrefix(hash, m); found {
			salt, digest, ok := strings.Cut(rest, "$")
			return m, salt, ok && salt != "" && len(salt) <= 8 && len(digest) == 22
		}
	}
	return "", "", false
}

const itoa64 = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// md5Crypt is Poul-Henning Kamp's MD5-crypt, which Apache's $apr1$ uses with another magic.
func md5Crypt(password, salt, magic []byte) string {
	if len(salt) > 8 {
		salt = salt[:8]
	}
	alt := md5.New()
	alt.Write(password)
	alt.Write(salt)
	alt.Write(password)
	altSum := alt.Sum(nil)

	h := md5.New()
	h.Write(password)
	h.Write(magic)
	h.Write(salt)
	for n := len(password); n > 0; n -= 16 {
		h.Write(altSum[:min(n, 16)])
	}
	for i := len(password); i != 0; i >>= 1 {
		if i&1 != 0 {
			h.Write([]byte{0})
		} else {
			h.Write(password[:1])
		}
	}
	sum := h.Sum(nil)
	for i := range 1000 {
		r := md5.New()
		if i&1 != 0 {
			r.Write(password)
		} else {
			r.Write(sum)
		}
		if i%3 != 0 {
			r.Write(salt)
		}
		if i%7 != 0 {
			r.Write(password)
		}
		if i&1 != 0 {
			r.Write(sum)
		} else {
			r.Write(password)
		}
		sum = r.Sum(nil)
	}
	var out strings.Builder
	out.Write(magic)
	out.Write(salt)
	out.WriteByte('$')
	to64 := func(v uint32, n int) {
		for ; n > 0; n-- {
			out.WriteByte(itoa64[v&0x3f])
			v >>= 6
		}
	}
	for _, g := range [][3]int{{0, 6, 12}, {1, 7, 13}, {2, 8, 14}, {3, 9, 15}, {4, 10, 5}} {
		to64(uint32(sum[g[0]])<<16|uint32(sum[g[1]])<<8|uint32(sum[g[2]]), 4)
	}
	to64(uint32(sum[11]), 2)
	return out.String()
}
