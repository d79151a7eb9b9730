package adminapi

import (
	"encoding/json"
	"testing"
)

// FuzzDecodePolicies: any body either fails to decode with an error or decodes into documents that
// normalise and survive an encode/decode round trip — never a panic.
func FuzzDecodePolicies(f *testing.F) {
	for _, seed := range []string{
		`{}`, `null`, `{"replication_clusters":["a","b"]}`,
		`{"backlog_quota_map":{"destination_storage":{"limit":"1048576","policy":"producer_request_hold"}}}`,
		`{"auth_policies":{"namespace_auth":{"anonymous":["produce","consume"]}},"replication_clusters":["standalone"]}`,
		`{"delayed_delivery_policies":{"tickTime":1,"active":true,"maxDelayInMillis":5}}`,
		`{"offload_policies":{"x":[1,2,{"y":null}]}}`, `{"message_ttl_in_seconds":"3"}`, `[1,2]`, `{"bogus":1}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p := NewPolicies()
		if err := DecodeBody(body, &p); err == nil {
			p.Normalize()
			b, err := json.Marshal(p)
			if err != nil {
				t.Fatalf("decoded policies do not encode: %v", err)
			}
			q := NewPolicies()
			if err := DecodeBody(b, &q); err != nil {
				t.Fatalf("encoded policies do not decode: %v\n%s", err, b)
			}
		}
		var tp TopicPolicies
		if err := DecodeBody(body, &tp); err == nil {
			tp.Normalize()
			_ = tp.IsEmpty()
		}
		var q BacklogQuota
		_ = DecodeBody(body, &q)
	})
}

func FuzzNames(f *testing.F) {
	for _, s := range []string{"t", "public/default/t", "persistent://a/b/c", "non-persistent://a/b/c-partition-3", "x://a/b/c", "a/b", "1:2:3:4", "-1:-1", "::"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if p, err := TopicRESTPath(s); err == nil && p == "" {
			t.Fatal("empty path without error")
		}
		_, _ = FullTopicName(s)
		_, _ = NamespacePath(s)
		if id, err := ParseMessageID(s); err == nil {
			if again, err := ParseMessageID(id.String()); err != nil || again != id {
				t.Fatalf("message id %q does not round-trip: %+v %+v %v", s, id, again, err)
			}
		}
	})
}
