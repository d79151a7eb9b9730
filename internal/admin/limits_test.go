package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/metadata/memstore"
	"github.com/meridian-mq/meridian/internal/poll"
)

// TestAdminRefusesOversizedNamesAndProperties: the admin API refuses topic names above 1,024
// bytes (partitions included), subscription names above 256 bytes and subscription properties
// above 64 entries or 16 KiB, with 412 and a reason naming the limit.
func TestAdminRefusesOversizedNamesAndProperties(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	e := newEnv(t, s)
	ctx := context.Background()
	// A namespace long enough for 1,024-byte topic names: "persistent://public/<ns>/<512 bytes>".
	local := strings.Repeat("t", 512)
	ns := strings.Repeat("n", 1024-len("persistent://public/")-1-len(local))
	p := adminapi.NewPolicies()
	p.ReplicationClusters = []string{"standalone"}
	for _, n := range []string{ns, ns + "n"} {
		if err := e.cat.EnsureNamespace(ctx, "public/"+n, p); err != nil {
			t.Fatal(err)
		}
	}
	base := "/admin/v2/persistent/public/" + ns + "/"
	e.expect("PUT", "/admin/v2/persistent/public/"+ns+"n/"+local, "", 412, "1024")
	e.expect("PUT", base+local, "", 204, "")
	// A partitioned topic whose partition names would be too long.
	short := local[:len(local)-len("-partition-1")]
	e.expect("PUT", "/admin/v2/persistent/public/"+ns+"n/"+short+"/partitions", "2", 412, "1024")
	e.expect("PUT", base+short+"/partitions", "2", 204, "")
	e.expect("POST", base+short+"/partitions", "11", 412, "Topic name is not valid") // "-partition-10" is one byte longer

	topic := "/admin/v2/persistent/public/default/subs"
	e.expect("PUT", topic, "", 204, "")
	e.expect("PUT", topic+"/subscription/"+strings.Repeat("s", 257), "", 412, "256")
	many := map[string]string{}
	for i := range 65 {
		many[fmt.Sprint("k", i)] = "v"
	}
	body := func(props map[string]string) string {
		var kv []string
		for k, v := range props {
			kv = append(kv, fmt.Sprintf("%q:%q", k, v))
		}
		return `{"entryId":-1,"ledgerId":-1,"properties":{` + strings.Join(kv, ",") + `}}`
	}
	e.expect("PUT", topic+"/subscription/s", body(many), 412, "64")
	e.expect("PUT", topic+"/subscription/s", body(map[string]string{"k": strings.Repeat("v", 16<<10)}), 412, "16384")
	e.expect("PUT", topic+"/subscription/"+strings.Repeat("s", 256), body(map[string]string{"k": "v"}), 204, "")
}

// TestAdminBoundsTopicAndNamespaceProperties: topic properties (at creation, partitioned or not,
// and by PUT .../properties, counted after the merge) and namespace properties (PUT
// .../property/{k}/{v} and the properties policy) are held to the limits of subscription
// properties, 64 entries and 16 KiB, with 412: a tenant's admin could otherwise grow the
// namespace's policy document until every later policy write to it, a superuser's included, failed.
func TestAdminBoundsTopicAndNamespaceProperties(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	e := newEnv(t, s)
	json := func(props map[string]string) string {
		var kv []string
		for k, v := range props {
			kv = append(kv, fmt.Sprintf("%q:%q", k, v))
		}
		return "{" + strings.Join(kv, ",") + "}"
	}
	many := func(n int, prefix string) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprint(prefix, i)] = "v"
		}
		return m
	}
	big := map[string]string{"k": strings.Repeat("v", 16<<10)}
	base := "/admin/v2/persistent/public/default/"

	e.expect("PUT", base+"created-many", json(many(65, "k")), 412, "64")
	e.expect("PUT", base+"created-big", json(big), 412, "16384")
	if code, body, _ := e.call("PUT", base+"part/partitions", `{"partitions":2,"properties":`+json(many(65, "k"))+`}`,
		"Content-Type", "application/vnd.partitioned-topic-metadata+json"); code != 412 || !strings.Contains(body, "64") {
		t.Fatalf("partitioned topic with 65 properties: %d %s", code, body)
	}
	e.expect("PUT", base+"t", json(many(40, "a")), 204, "")
	e.expect("PUT", base+"t/properties", json(many(40, "b")), 412, "64") // 80 after the merge
	e.expect("PUT", base+"t/properties", json(many(20, "b")), 204, "")
	e.expect("DELETE", base+"t/properties?key=a0", "", 204, "")

	ns := "/admin/v2/namespaces/public/default"
	e.expect("PUT", ns+"/properties", json(many(65, "k")), 412, "64")
	e.expect("PUT", ns+"/properties", json(many(64, "k")), 204, "")
	e.expect("PUT", ns+"/property/one-more/v", "", 412, "64")
	e.expect("PUT", ns+"/property/k0/other", "", 204, "") // replaces a key: still 64
}

// A namespace whose stored document already exceeds a bound (written by an older build or another
// cluster) stays editable: removing one of too many properties, or changing another policy while
// an old out-of-range TTL stays as it is, is accepted; raising the TTL out of range is not.
func TestNamespaceOverABoundStaysEditable(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	e := newEnv(t, s)
	ctx := context.Background()
	const key = "/admin/policies/public/default"
	kv, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(kv.Value, &doc); err != nil {
		t.Fatal(err)
	}
	props := map[string]string{}
	for i := range 70 {
		props[fmt.Sprint("k", i)] = "v"
	}
	doc["properties"] = props
	doc["message_ttl_in_seconds"] = int64(1) << 40
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, key, b, kv.Version); err != nil {
		t.Fatal(err)
	}
	ns := "/admin/v2/namespaces/public/default"
	poll.Until(t, 10*time.Second, "the catalog sees the stored document", func() bool {
		code, body, _ := e.call("GET", ns+"/properties", "")
		return code == 200 && strings.Contains(body, "k69")
	})
	e.expect("DELETE", ns+"/property/k0", "", 204, "")
	e.expect("POST", ns+"/maxConsumersPerTopic", "5", 204, "")
	e.expect("PUT", ns+"/property/new/v", "", 412, "64")
	e.expect("POST", ns+"/messageTTL", "60", 204, "")
	e.expect("POST", ns+"/messageTTL", "2147483648", 412, "")
}
