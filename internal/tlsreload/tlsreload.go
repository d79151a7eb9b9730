// Package tlsreload serves a TLS identity (certificate chain, private key, CA certificates) from
// PEM files and loads it again when the files' content changes, so certificates are rotated
// without a restart: a server's tls.Config asks for the current identity at every handshake
// (GetConfigForClient), and the files are read again at most once per refresh interval.
//
// A change that does not load (a certificate written before its key, a truncated file) keeps the
// previous identity in service and is logged once; the next check tries again. Connections already
// established keep the identity they were made with.
//
// The package is a leaf: it imports only the standard library.
package tlsreload

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// MaxFileBytes bounds each PEM file.
const MaxFileBytes = 1 << 20

// Files names the PEM files of a TLS identity.
type Files struct {
	// CertFile is the certificate chain (leaf first) and KeyFile its private key.
	CertFile, KeyFile string
	// CAFile holds the CA certificates peers are verified against; empty for none.
	CAFile string
}

// Options configure a Reloader.
type Options struct {
	// RefreshInterval is the least time between two reads of the files; 0 reads them at every
	// handshake.
	RefreshInterval time.Duration
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Now replaces time.Now (tests).
	Now func() time.Time
}

// Reloader holds the identity loaded from Files. It is safe for concurrent use.
type Reloader struct {
	files Files
	opts  Options
	log   *slog.Logger

	mu        sync.Mutex
	nextCheck time.Time
	lastErr   string // the last failed reload's error, logged once
	cur       atomic.Pointer[Identity]
}

// Identity is one loaded version of the files.
type Identity struct {
	// Certificate is the chain and key (Leaf parsed).
	Certificate *tls.Certificate
	// CAs are the CA certificates of CAFile; nil without one.
	CAs    *x509.CertPool
	digest [sha256.Size]byte
}

// New loads the files and returns a Reloader serving them. Errors name the file.
func New(files Files, opts Options) (*Reloader, error) {
	if files.CertFile == "" || files.KeyFile == "" {
		return nil, errors.New("tlsreload: a certificate file and a key file are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	r := &Reloader{files: files, opts: opts, log: opts.Logger}
	contents, digest, err := readFiles(files)
	if err != nil {
		return nil, err
	}
	id, err := load(files, contents, digest)
	if err != nil {
		return nil, err
	}
	r.cur.Store(id)
	r.nextCheck = opts.Now().Add(opts.RefreshInterval)
	r.warnValidity(id)
	return r, nil
}

// Current returns the identity in service, first reading the files again if the refresh interval
// has passed since the last read.
func (r *Reloader) Current() *Identity {
	now := r.opts.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Before(r.nextCheck) {
		return r.cur.Load()
	}
	r.nextCheck = now.Add(r.opts.RefreshInterval)
	cur := r.cur.Load()
	contents, digest, err := readFiles(r.files)
	if err == nil && digest == cur.digest {
		r.lastErr = ""
		return cur
	}
	var id *Identity
	if err == nil {
		id, err = load(r.files, contents, digest)
	}
	if err != nil {
		if msg := err.Error(); msg != r.lastErr {
			r.lastErr = msg
			r.log.Warn("TLS files changed but do not load; the previous certificate stays in service", "err", err)
		}
		return cur
	}
	r.lastErr = ""
	r.cur.Store(id)
	r.log.Info("TLS certificate reloaded", "cert", r.files.CertFile, "subject", id.Certificate.Leaf.Subject.String(),
		"notAfter", id.Certificate.Leaf.NotAfter.UTC().Format(time.RFC3339))
	r.warnValidity(id)
	return id
}

func (r *Reloader) warnValidity(id *Identity) {
	leaf := id.Certificate.Leaf
	now := r.opts.Now()
	switch {
	case now.After(leaf.NotAfter):
		r.log.Warn("TLS certificate has expired", "cert", r.files.CertFile, "notAfter", leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		r.log.Warn("TLS certificate is not valid yet", "cert", r.files.CertFile, "notBefore", leaf.NotBefore.UTC().Format(time.RFC3339))
	}
}

// ServerPolicy is how a TLS listener treats its clients.
type ServerPolicy struct {
	// ClientAuth: tls.NoClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert (verified
	// against the identity's CAs), or RequestClientCert (taken, not verified).
	ClientAuth tls.ClientAuthType
	// MinVersion and MaxVersion; MinVersion below TLS 1.2 is raised to it.
	MinVersion, MaxVersion uint16
	// CipherSuites for TLS 1.2; nil means Go's secure default.
	CipherSuites []uint16
	// NextProtos are the ALPN protocols offered.
	NextProtos []string
}

// ServerConfig returns a config for tls.NewListener that hands every handshake the current
// identity under policy p.
func (r *Reloader) ServerConfig(p ServerPolicy) *tls.Config {
	if p.MinVersion < tls.VersionTLS12 {
		p.MinVersion = tls.VersionTLS12
	}
	type built struct {
		id  *Identity
		cfg *tls.Config
	}
	var cache atomic.Pointer[built]
	return &tls.Config{
		MinVersion: p.MinVersion,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			id := r.Current()
			if b := cache.Load(); b != nil && b.id == id {
				return b.cfg, nil
			}
			cfg := &tls.Config{
				Certificates: []tls.Certificate{*id.Certificate},
				ClientAuth:   p.ClientAuth,
				ClientCAs:    id.CAs,
				MinVersion:   p.MinVersion,
				MaxVersion:   p.MaxVersion,
				CipherSuites: p.CipherSuites,
				NextProtos:   p.NextProtos,
			}
			cache.Store(&built{id: id, cfg: cfg})
			return cfg, nil
		},
	}
}

// ClientConfig loads a client's TLS settings once: the CA certificates the server is verified
// against (CAFile; empty: the system's), an optional client certificate (CertFile and KeyFile,
// both or neither) and, with insecure, no verification of the server at all. TLS 1.2 is the
// minimum.
func ClientConfig(files Files, insecure bool) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: insecure}
	if files.CAFile != "" {
		pem, err := readFile(files.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tlsreload: %s holds no PEM certificate", files.CAFile)
		}
	}
	switch {
	case files.CertFile != "" && files.KeyFile != "":
		cert, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tlsreload: client certificate %s / key %s: %w", files.CertFile, files.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case files.CertFile != "" || files.KeyFile != "":
		return nil, errors.New("tlsreload: a client certificate needs both the certificate file and the key file")
	}
	return cfg, nil
}

// readFiles reads the identity's files and digests their content together.
func readFiles(f Files) ([3][]byte, [sha256.Size]byte, error) {
	var contents [3][]byte
	h := sha256.New()
	for i, name := range []string{f.CertFile, f.KeyFile, f.CAFile} {
		if name == "" {
			continue
		}
		b, err := readFile(name)
		if err != nil {
			return contents, [sha256.Size]byte{}, err
		}
		contents[i] = b
		fmt.Fprintf(h, "%d:%d:", i, len(b))
		h.Write(b)
	}
	var d [sha256.Size]byte
	copy(d[:], h.Sum(nil))
	return contents, d, nil
}

func readFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("tlsreload: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("tlsreload: read %s: %w", name, err)
	}
	if len(b) > MaxFileBytes {
		return nil, fmt.Errorf("tlsreload: %s is larger than %d bytes", name, MaxFileBytes)
	}
	return b, nil
}

func load(f Files, contents [3][]byte, digest [sha256.Size]byte) (*Identity, error) {
	cert, err := tls.X509KeyPair(contents[0], contents[1])
	if err != nil {
		return nil, fmt.Errorf("tlsreload: certificate %s / key %s: %w", f.CertFile, f.KeyFile, err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("tlsreload: certificate %s: %w", f.CertFile, err)
		}
	}
	id := &Identity{Certificate: &cert, digest: digest}
	if f.CAFile != "" {
		id.CAs = x509.NewCertPool()
		if !id.CAs.AppendCertsFromPEM(contents[2]) {
			return nil, fmt.Errorf("tlsreload: %s holds no PEM certificate", f.CAFile)
		}
	}
	return id, nil
}
