package auth

// TLSProvider authenticates a client by its TLS client certificate: the role is the certificate's
// common name (Pulsar's AuthenticationProviderTls). Only a certificate the listener verified
// against its trust file counts; one accepted without verification (tlsAllowInsecureConnection)
// proves nothing and is refused.
type TLSProvider struct{}

// Method is "tls".
func (TLSProvider) Method() string { return MethodTLS }

// Authenticate returns the common name of the verified client certificate.
func (TLSProvider) Authenticate(c Credentials) (Identity, error) {
	if c.TLS == nil {
		return Identity{}, fail("tls: the connection is not TLS")
	}
	if len(c.TLS.VerifiedChains) == 0 || len(c.TLS.VerifiedChains[0]) == 0 {
		if len(c.TLS.PeerCertificates) > 0 {
			return Identity{}, fail("tls: the client certificate was not verified")
		}
		return Identity{}, fail("tls: no client certificate")
	}
	leaf := c.TLS.VerifiedChains[0][0]
	if leaf.Subject.CommonName == "" {
		return Identity{}, fail("tls: the client certificate has no common name")
	}
	return Identity{Role: leaf.Subject.CommonName, ExpiresAt: leaf.NotAfter}, nil
}
