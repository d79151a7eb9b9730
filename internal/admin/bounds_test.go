package admin_test

import (
	"testing"

	"github.com/meridian-mq/meridian/internal/metadata/memstore"
)

// TestAdminRefusesPolicyValuesThatOverflow: a TTL, subscription expiration, retention or
// expireMessages age is a Java int in Pulsar (retentionSizeInMB a long), and the broker multiplies it
// into nanoseconds or bytes; a value above the bound is refused as a negative one is, so that it
// never wraps into a tiny age or size. The bounds themselves are accepted.
func TestAdminRefusesPolicyValuesThatOverflow(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	e := newEnv(t, s)
	const (
		maxInt32         = "2147483647"
		aboveInt32       = "2147483648"
		maxRetentionMB   = "8796093022207" // math.MaxInt64>>20: its bytes still fit an int64
		aboveRetentionMB = "8796093022208"
	)
	ns := "/admin/v2/namespaces/public/default"

	// 18446744074 s wraps to 290 ms, 307445734562 min to 10.4 s, 17592186044416 MB to 0 bytes.
	for _, v := range []string{"18446744074", "9223372037", aboveInt32} {
		e.expect("POST", ns+"/messageTTL", v, 412, "Invalid value for message TTL")
	}
	e.expect("POST", ns+"/messageTTL", maxInt32, 204, "")
	for _, v := range []string{"307445734562", aboveInt32} {
		e.expect("POST", ns+"/subscriptionExpirationTime", v, 412, "Invalid value for subscription expiration time")
	}
	e.expect("POST", ns+"/subscriptionExpirationTime", maxInt32, 204, "")
	for _, body := range []string{
		`{"retentionTimeInMinutes":-1,"retentionSizeInMB":17592186044416}`,
		`{"retentionTimeInMinutes":307445734562,"retentionSizeInMB":-1}`,
		`{"retentionTimeInMinutes":` + aboveInt32 + `,"retentionSizeInMB":1}`,
		`{"retentionTimeInMinutes":1,"retentionSizeInMB":` + aboveRetentionMB + `}`,
	} {
		e.expect("POST", ns+"/retention", body, 412, "Invalid retention policy")
	}
	e.expect("POST", ns+"/retention", `{"retentionTimeInMinutes":`+maxInt32+`,"retentionSizeInMB":`+maxRetentionMB+`}`, 204, "")
	if b := e.expect("GET", ns+"/messageTTL", "", 200, ""); b != maxInt32 {
		t.Fatalf("messageTTL after the refusals = %s, want %s", b, maxInt32)
	}

	// A namespace created with a whole policy document is held to the same bounds.
	e.expect("PUT", "/admin/v2/namespaces/public/ttl", `{"message_ttl_in_seconds":18446744074}`, 412, "Invalid value for message TTL")
	e.expect("PUT", "/admin/v2/namespaces/public/expiry", `{"subscription_expiration_time_minutes":307445734562}`, 412, "Invalid value for subscription expiration time")
	e.expect("PUT", "/admin/v2/namespaces/public/ret", `{"retention_policies":{"retentionTimeInMinutes":-1,"retentionSizeInMB":17592186044416}}`, 412, "Invalid retention policy")

	topic := "/admin/v2/persistent/public/default/bounded"
	e.expect("PUT", topic, "", 204, "")
	e.expect("POST", topic+"/messageTTL?messageTTL=18446744074", "", 412, "Invalid value for message TTL")
	e.expect("POST", topic+"/messageTTL", "18446744074", 412, "Invalid value for message TTL")
	e.expect("POST", topic+"/messageTTL?messageTTL="+maxInt32, "", 204, "")
	e.expect("POST", topic+"/retention", `{"retentionTimeInMinutes":-1,"retentionSizeInMB":17592186044416}`, 412, "Invalid retention policy")
	e.expect("POST", topic+"/retention", `{"retentionTimeInMinutes":307445734562,"retentionSizeInMB":-1}`, 412, "Invalid retention policy")
	if b := e.expect("GET", topic+"/messageTTL", "", 200, ""); b != maxInt32 {
		t.Fatalf("topic messageTTL after the refusals = %s, want %s", b, maxInt32)
	}

	e.expect("PUT", topic+"/subscription/s", "", 204, "")
	for _, v := range []string{"18446744074", "9223372037", aboveInt32} {
		e.expect("POST", topic+"/subscription/s/expireMessages/"+v, "", 400, "Invalid expiration time")
		e.expect("POST", topic+"/all_subscription/expireMessages/"+v, "", 400, "Invalid expiration time")
	}
	e.expect("POST", topic+"/subscription/s/expireMessages/"+maxInt32, "", 204, "")
	e.expect("POST", topic+"/all_subscription/expireMessages/"+maxInt32, "", 204, "")
}
