package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
)

// MaxKeyBytes bounds a key or htpasswd file read through a KeySource.
const MaxKeyBytes = 1 << 20

// KeySource is where a key (tokenSecretKey, tokenPublicKey) or an htpasswd file (basicAuthConf)
// comes from, in Pulsar's forms: "file:///path" (or a plain path), or inline data as an RFC 2397
// URL, "data:;base64,<base64>" (or "data:,<percent-encoded text>"). Its String never shows inline
// data.
type KeySource struct {
	// Path is the file to read; empty with inline data.
	Path string
	// Data is the inline content of a data: URL.
	Data []byte
	set  bool
}

// IsSet reports whether a source was configured.
func (k KeySource) IsSet() bool { return k.set }

// String names the file, or says inline data without showing it.
func (k KeySource) String() string {
	switch {
	case !k.set:
		return ""
	case k.Path != "":
		return "file://" + k.Path
	default:
		return fmt.Sprintf("data: (%d bytes)", len(k.Data))
	}
}

// ParseKeySource reads Pulsar's forms of a key location; "" is no source.
func ParseKeySource(v string) (KeySource, error) {
	switch {
	case v == "":
		return KeySource{}, nil
	case strings.HasPrefix(v, "data:"):
		data, err := decodeDataURL(v)
		if err != nil {
			return KeySource{}, err
		}
		return KeySource{Data: data, set: true}, nil
	case strings.HasPrefix(v, "file:"):
		u, err := url.Parse(v)
		if err != nil {
			return KeySource{}, errors.New("not a file: URL") // the value may be a secret: not echoed
		}
		if u.Host != "" && u.Host != "localhost" {
			return KeySource{}, fmt.Errorf("file URL names host %q: only local files (file:///path) are read", u.Host)
		}
		path := u.Path
		if path == "" {
			path = u.Opaque // file:relative/path
		}
		if path == "" {
			return KeySource{}, errors.New("file URL without a path")
		}
		return KeySource{Path: path, set: true}, nil
	default:
		return KeySource{Path: v, set: true}, nil
	}
}

// decodeDataURL decodes "data:[<media type>][;base64],<data>".
func decodeDataURL(v string) ([]byte, error) {
	header, payload, ok := strings.Cut(strings.TrimPrefix(v, "data:"), ",")
	if !ok {
		return nil, errors.New("data: URL without ','")
	}
	if strings.HasSuffix(header, ";base64") {
		data, err := base64.StdEncoding.DecodeString(payload)
		if err != nil {
			// Keys are also written URL-safe or without padding.
			if d2, err2 := base64.RawStdEncoding.DecodeString(strings.TrimRight(payload, "=")); err2 == nil {
				return d2, nil
			}
			if d3, err3 := base64.RawURLEncoding.DecodeString(strings.TrimRight(payload, "=")); err3 == nil {
				return d3, nil
			}
			return nil, errors.New("data: URL is not valid base64")
		}
		return data, nil
	}
	text, err := url.PathUnescape(payload)
	if err != nil {
		return nil, errors.New("data: URL is not valid percent-encoding")
	}
	return []byte(text), nil
}

// Load returns the key's bytes: the inline data, or the file's content (at most MaxKeyBytes).
func (k KeySource) Load() ([]byte, error) {
	if !k.set {
		return nil, errors.New("no key configured")
	}
	if k.Path == "" {
		return k.Data, nil
	}
	f, err := os.Open(k.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxKeyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", k.Path, err)
	}
	if len(data) > MaxKeyBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", k.Path, MaxKeyBytes)
	}
	return data, nil
}
