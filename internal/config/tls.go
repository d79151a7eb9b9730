package config

import (
	"crypto/tls"
	"fmt"
	"slices"
	"strings"
)

const (
	tlsVersion12 = tls.VersionTLS12
	tlsVersion13 = tls.VersionTLS13
)

// setTLSProtocols reads Pulsar's tlsProtocols ("TLSv1.3,TLSv1.2"). Versions below TLS 1.2 are
// refused rather than dropped: the file asks for something this broker will not do.
func setTLSProtocols(s *Settings, v string) error {
	var versions []uint16
	for _, p := range splitList(v) {
		switch p {
		case "TLSv1.2":
			versions = append(versions, tls.VersionTLS12)
		case "TLSv1.3":
			versions = append(versions, tls.VersionTLS13)
		case "TLSv1", "TLSv1.0", "TLSv1.1", "SSLv3", "SSLv2Hello":
			return fmt.Errorf("%s is not supported: TLS 1.2 is the minimum (list TLSv1.2 and/or TLSv1.3)", p)
		default:
			return fmt.Errorf("%q is not a TLS version (TLSv1.2, TLSv1.3)", p)
		}
	}
	if len(versions) == 0 {
		return nil // empty list: the default
	}
	s.TLS.MinVersion, s.TLS.MaxVersion = slices.Min(versions), slices.Max(versions)
	return nil
}

func protocolsText(minV, maxV uint16) string {
	var out []string
	if maxV >= tls.VersionTLS13 {
		out = append(out, "TLSv1.3")
	}
	if minV <= tls.VersionTLS12 {
		out = append(out, "TLSv1.2")
	}
	return strings.Join(out, ",")
}

// tls13Suites are the TLS 1.3 suites; Go always enables all of them, so a list may name them all
// or none.
var tls13Suites = []string{"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}

// setTLSCiphers reads Pulsar's tlsCiphers: IANA (Java) names of cipher suites. Names of insecure
// suites, unknown names and a partial list of the TLS 1.3 suites are refused.
func setTLSCiphers(s *Settings, v string) error {
	secure := map[string]uint16{}
	for _, cs := range tls.CipherSuites() {
		secure[cs.Name] = cs.ID
	}
	insecure := map[string]bool{}
	for _, cs := range tls.InsecureCipherSuites() {
		insecure[cs.Name] = true
	}
	var ids []uint16
	named13 := 0
	for _, name := range splitList(v) {
		switch {
		case slices.Contains(tls13Suites, name):
			named13++
		case insecure[name]:
			return fmt.Errorf("%s is an insecure cipher suite and not supported", name)
		case secure[name] != 0:
			if !slices.Contains(ids, secure[name]) {
				ids = append(ids, secure[name])
			}
		default:
			return fmt.Errorf("%q is not a cipher suite this build knows (IANA names such as TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)", name)
		}
	}
	if named13 != 0 && named13 != len(tls13Suites) {
		return fmt.Errorf("naming some TLS 1.3 suites is not supported: all of %s are always enabled with TLS 1.3 (name all or none)", strings.Join(tls13Suites, ", "))
	}
	s.TLS.CipherSuites = ids
	// Only TLS 1.3 suites named: TLS 1.2 is off (finishTLS applies it once tlsProtocols is known).
	s.tls13Only = named13 != 0 && len(ids) == 0
	return nil
}

// finishTLS applies what depends on several TLS keys at once.
func (s *Settings) finishTLS() error {
	if !s.tls13Only {
		return nil
	}
	if s.TLS.MaxVersion < tls.VersionTLS13 {
		return fmt.Errorf("tlsCiphers names only TLS 1.3 suites but tlsProtocols excludes TLSv1.3")
	}
	s.TLS.MinVersion = tls.VersionTLS13
	return nil
}

func ciphersText(ids []uint16) string {
	names := make([]string, len(ids))
	for i, id := range ids {
		names[i] = tls.CipherSuiteName(id)
	}
	return strings.Join(names, ",")
}
