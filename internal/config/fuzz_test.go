package config

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParse: any input either parses or fails with a ParseError, never panics; every entry has a
// valid key and a value without surrounding whitespace; writing the entries back as key=value
// lines and parsing again gives the same entries; and Apply on them never panics.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"clusterName=standalone\nbrokerServicePort=6650\n",
		"# comment\n! comment\n\n  a = b = c  \r\n",
		"brokerServicePortTls=\nwebServicePortTls=8443\nbindAddress=0.0.0.0\n",
		"tlsProtocols=TLSv1.3,TLSv1.2\ntlsCiphers=TLS_AES_128_GCM_SHA256\n",
		"tokenSecretKey=data:;base64,AAAA\ntokenPublicKey=file:///k.pem\nbasicAuthConf=data:,user%3Ahash\n",
		"authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderToken\n",
		"a=b\\\n",
		"\xef\xbb\xbfk=v",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := Parse(bytes.NewReader(data))
		if err != nil {
			if _, ok := err.(*ParseError); !ok {
				t.Fatalf("error %T %v is not a *ParseError", err, err)
			}
			return
		}
		var again strings.Builder
		for _, e := range entries {
			if checkKey(e.Key) != nil || strings.TrimSpace(e.Value) != e.Value || !utf8.ValidString(e.Value) || strings.ContainsAny(e.Value, "\n") {
				t.Fatalf("bad entry %+v", e)
			}
			again.WriteString(e.Key + "=" + e.Value + "\n")
		}
		reparsed, err := Parse(strings.NewReader(again.String()))
		if err != nil || len(reparsed) != len(entries) {
			t.Fatalf("re-parse of %q: %v, %d entries, want %d", again.String(), err, len(reparsed), len(entries))
		}
		for i := range entries {
			if reparsed[i].Key != entries[i].Key || reparsed[i].Value != entries[i].Value {
				t.Fatalf("entry %d: %+v became %+v", i, entries[i], reparsed[i])
			}
		}
		s := Settings{TLS: DefaultTLS(), Auth: DefaultAuth()}
		_, _ = s.Apply(Sources{File: entries})
	})
}
