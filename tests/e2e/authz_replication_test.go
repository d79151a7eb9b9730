package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
	"github.com/golang-jwt/jwt/v5"

	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// securedCluster is a broker with TLS listeners, token authentication and authorization.
type securedCluster struct {
	*tlsBroker
	name   string
	secret []byte
}

func startSecuredCluster(t *testing.T, name string) *securedCluster {
	t.Helper()
	secret := []byte(fmt.Sprintf("%-32s", "secret-of-"+name))
	secretFile := filepath.Join(t.TempDir(), "secret.key")
	if err := os.WriteFile(secretFile, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	b := startTLSBrokerWith(t, fmt.Sprintf("authenticationEnabled=true\nauthenticationProviders=%s\ntokenSecretKey=file://%s\nauthorizationEnabled=true\nsuperUserRoles=root\n", tokenProvider, secretFile),
		harness.Options{Cluster: name})
	return &securedCluster{tlsBroker: b, name: name, secret: secret}
}

func (c *securedCluster) token(t *testing.T, role string, expires time.Duration) string {
	t.Helper()
	claims := jwt.MapClaims{"sub": role}
	if expires != 0 {
		claims["exp"] = time.Now().Add(expires).Unix()
	}
	return hsToken(t, c.secret, claims)
}

func (c *securedCluster) admin(t *testing.T) pulsaradmin.Client {
	t.Helper()
	a, err := pulsaradmin.NewClient(&pulsaradmin.Config{WebServiceURL: c.httpsURL, TLSTrustCertsFilePath: c.caFile, Token: c.token(t, "root", 0)})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// call sends an admin request as root and returns the status and body.
func (c *securedCluster) call(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, c.httpsURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token(t, "root", 0))
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpsClientFor(t, c.tlsBroker).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// register registers remote in c with a link over TLS, trusting caFile and authenticating with
// token (both replaced on every call).
func (c *securedCluster) register(t *testing.T, remote *securedCluster, caFile, token string, create bool) {
	t.Helper()
	data := utils.ClusterData{Name: remote.name, ServiceURL: remote.WebURL(), ServiceURLTls: remote.httpsURL,
		BrokerServiceURL: remote.ServiceURL(), BrokerServiceURLTls: remote.tlsURL, BrokerClientTLSEnabled: true,
		BrokerClientTrustCertsFilePath: caFile, AuthenticationPlugin: "org.apache.pulsar.client.impl.auth.AuthenticationToken",
		AuthenticationParameters: "token:" + token}
	op := c.admin(t).Clusters().Update
	if create {
		op = c.admin(t).Clusters().Create
	}
	if err := op(data); err != nil {
		t.Fatalf("register %s in %s: %v", remote.name, c.name, err)
	}
}

// outbound returns the replication stats of topic towards remote, as Meridian reports them.
func (c *securedCluster) outbound(t *testing.T, topic, remote string) (connected bool, lastError string, err error) {
	t.Helper()
	status, body := c.call(t, http.MethodGet, "/admin/v2/persistent/"+strings.TrimPrefix(topic, "persistent://")+"/stats", "")
	if status != http.StatusOK {
		return false, "", fmt.Errorf("stats: %d %s", status, body)
	}
	var st struct {
		Replication map[string]struct {
			Connected bool   `json:"connected"`
			LastError string `json:"lastError"`
		} `json:"replication"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return false, "", err
	}
	r, ok := st.Replication[remote]
	if !ok {
		return false, "", fmt.Errorf("no replicator to %s yet", remote)
	}
	return r.Connected, r.LastError, nil
}

// storedOn reports the number of messages topic holds on c (0 when it does not exist).
func (c *securedCluster) storedOn(t *testing.T, topic string) int64 {
	t.Helper()
	status, body := c.call(t, http.MethodGet, "/admin/v2/persistent/"+strings.TrimPrefix(topic, "persistent://")+"/stats", "")
	if status == http.StatusNotFound {
		return 0
	}
	var st struct {
		MsgInCounter int64 `json:"msgInCounter"`
	}
	if status != http.StatusOK || json.Unmarshal(body, &st) != nil {
		t.Fatalf("stats of %s on %s: %d %s", topic, c.name, status, body)
	}
	return st.MsgInCounter
}

// TestAuthzReplicationOverTLSWithTokens: two clusters, each with TLS, tokens and authorization,
// replicate over pulsar+ssl:// with a token of a role the receiving cluster registered as the
// sender's replicator role. Refused, with nothing stored on the receiver: a link that trusts the
// wrong CA, a link whose token has expired, and a client that names itself a replicator without
// that role (though it may produce to the namespace).
func TestAuthzReplicationOverTLSWithTokens(t *testing.T) {
	east, west := startSecuredCluster(t, "east"), startSecuredCluster(t, "west")
	east.register(t, west, west.caFile, west.token(t, "east-link", 0), true)
	west.register(t, east, east.caFile, east.token(t, "west-link", 0), true)
	for _, c := range []*securedCluster{east, west} {
		a := c.admin(t)
		if err := a.Tenants().Update(utils.TenantData{Name: "public", AllowedClusters: []string{"east", "west"}}); err != nil {
			t.Fatal(err)
		}
		if err := a.Namespaces().SetNamespaceReplicationClusters("public/default", []string{"east", "west"}); err != nil {
			t.Fatal(err)
		}
	}
	if status, body := west.call(t, http.MethodPost, "/admin/v2/clusters/east/replicatorRoles", `["east-link"]`); status != http.StatusNoContent {
		t.Fatalf("replicator role of east on west: %d %s", status, body)
	}
	if status, body := east.call(t, http.MethodPost, "/admin/v2/clusters/west/replicatorRoles", `["west-link"]`); status != http.StatusNoContent {
		t.Fatalf("replicator role of west on east: %d %s", status, body)
	}
	// The replicator role is set by superusers only.
	req, _ := http.NewRequest(http.MethodPost, west.httpsURL+"/admin/v2/clusters/east/replicatorRoles", strings.NewReader(`["app"]`))
	req.Header.Set("Authorization", "Bearer "+west.token(t, "app", 0))
	if resp, err := httpsClientFor(t, west.tlsBroker).Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a non-superuser setting replicator roles: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	client := func(c *securedCluster, role string) pulsar.Client {
		cl, err := tlsClient(t, c.tlsURL, c.caFile, func(o *pulsar.ClientOptions) {
			o.Authentication = pulsar.NewAuthenticationToken(c.token(t, role, 0))
			o.OperationTimeout = 5 * time.Second
		})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	produce := func(topic string, n int) {
		t.Helper()
		p, err := client(east, "root").CreateProducer(pulsar.ProducerOptions{Topic: topic})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		for i := range n {
			if _, err := p.Send(t.Context(), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint("m-", i))}); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Served: east -> west over TLS with the east-link token.
	const good = "persistent://public/default/geo-tls"
	cons, err := client(west, "root").Subscribe(pulsar.ConsumerOptions{Topic: good, SubscriptionName: "check", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	produce(good, 5)
	recvCtx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for i := range 5 {
		m, err := cons.Receive(recvCtx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Payload()) != fmt.Sprint("m-", i) || m.GetReplicatedFrom() != "east" {
			t.Fatalf("west received %q from %q", m.Payload(), m.GetReplicatedFrom())
		}
		_ = cons.Ack(m)
	}
	// East's position advertisements reach west over the same least-privilege link: the east-link
	// role may post advertisements whose source is east.
	harness.Eventually(t, 30*time.Second, "east's advertisements on west", func() error {
		status, body := west.call(t, http.MethodGet, "/admin/v2/namespaces/public/default/replicationSources?source=east", "")
		if status != http.StatusOK || !strings.Contains(string(body), good) {
			return fmt.Errorf("replicationSources: %d %s", status, body)
		}
		return nil
	})

	refusedLink := func(what, topic, wantErr string) {
		t.Helper()
		produce(topic, 3)
		harness.Eventually(t, 30*time.Second, what+": the link reports the refusal", func() error {
			connected, lastErr, err := east.outbound(t, topic, "west")
			if err != nil {
				return err
			}
			if connected || !strings.Contains(strings.ToLower(lastErr), wantErr) {
				return fmt.Errorf("connected=%v lastError=%q, want an error about %q", connected, lastErr, wantErr)
			}
			return nil
		})
		if n := west.storedOn(t, topic); n != 0 {
			t.Errorf("%s: west stored %d messages", what, n)
		}
	}
	// A link that trusts another CA than the one that signed west's certificate.
	east.register(t, west, east.caFile, west.token(t, "east-link", 0), false)
	refusedLink("wrong CA", "persistent://public/default/geo-wrong-ca", "certificate")
	// A link whose token has expired.
	east.register(t, west, west.caFile, west.token(t, "east-link", -time.Minute), false)
	refusedLink("expired token", "persistent://public/default/geo-expired", "expired")
	// A token of a role west does not register as east's replicator.
	east.register(t, west, west.caFile, west.token(t, "app", 0), false)
	refusedLink("role not east's replicator", "persistent://public/default/geo-wrong-role", "authoriz")

	// A client that claims to be east's replicator, with a role that may produce to the
	// namespace but is not east's replicator role.
	ns, _ := utils.GetNamespaceName("public/default")
	if err := west.admin(t).Namespaces().GrantNamespacePermission(*ns, "app", []utils.AuthAction{"produce"}); err != nil {
		t.Fatal(err)
	}
	const forged = "persistent://public/default/geo-impostor"
	_, err = client(west, "app").CreateProducer(pulsar.ProducerOptions{Topic: forged, Name: "pulsar.repl.east-->west"})
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "authoriz") {
		t.Fatalf("an impostor replicator: %v, want an authorization error", err)
	}
	if n := west.storedOn(t, forged); n != 0 {
		t.Errorf("impostor: west stored %d messages", n)
	}
	// The same role produces normally.
	p, err := client(west, "app").CreateProducer(pulsar.ProducerOptions{Topic: forged})
	if err != nil {
		t.Fatalf("app producing normally: %v", err)
	}
	p.Close()
}
