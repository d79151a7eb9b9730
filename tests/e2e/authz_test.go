package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
	"github.com/golang-jwt/jwt/v5"
)

// TestAuthzPermissions runs a broker with authorizationEnabled=true and drives Pulsar's model
// with pulsaradmin and the real client: a superuser creates a tenant with an admin role; that
// admin creates a namespace and grants produce on it, consume on one topic, and a subscription
// to one role; each role can do what it was granted and is refused the rest (403 over HTTP,
// AuthorizationError on the binary protocol); a revoked grant stops working.
func TestAuthzPermissions(t *testing.T) {
	secret := []byte("meridian-e2e-secret-key-32-bytes")
	secretFile := filepath.Join(t.TempDir(), "secret.key")
	if err := os.WriteFile(secretFile, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	b := startTLSBroker(t, fmt.Sprintf("authenticationEnabled=true\nauthenticationProviders=%s\ntokenSecretKey=file://%s\nauthorizationEnabled=true\nsuperUserRoles=root,ops\n", tokenProvider, secretFile))
	token := func(role string) string { return hsToken(t, secret, jwt.MapClaims{"sub": role}) }
	admin := func(role string) pulsaradmin.Client {
		a, err := pulsaradmin.NewClient(&pulsaradmin.Config{WebServiceURL: b.httpsURL, TLSTrustCertsFilePath: b.caFile, Token: token(role)})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	client := func(role string) pulsar.Client {
		c, err := tlsClient(t, b.tlsURL, b.caFile, func(o *pulsar.ClientOptions) {
			o.Authentication = pulsar.NewAuthenticationToken(token(role))
			o.OperationTimeout = 5 * time.Second
		})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	forbidden := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "403") {
			t.Errorf("%s: %v, want a 403", what, err)
		}
	}
	refused := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "authoriz") {
			t.Errorf("%s: %v, want an authorization error", what, err)
		}
	}

	root := admin("root")
	clusters, err := root.Clusters().List()
	if err != nil || len(clusters) == 0 {
		t.Fatalf("clusters: %v %v", clusters, err)
	}
	if err := root.Tenants().Create(utils.TenantData{Name: "acme", AdminRoles: []string{"acme-admin"}, AllowedClusters: clusters}); err != nil {
		t.Fatal(err)
	}
	forbidden("a tenant admin creating a tenant", admin("acme-admin").Tenants().Create(utils.TenantData{Name: "evil", AllowedClusters: clusters}))
	_, err = admin("stranger").Tenants().List()
	forbidden("a stranger listing tenants", err)

	acme := admin("acme-admin")
	ns, _ := utils.GetNamespaceName("acme/app")
	if err := acme.Namespaces().CreateNamespace("acme/app"); err != nil {
		t.Fatal(err)
	}
	orders, _ := utils.GetTopicName("persistent://acme/app/orders")
	if err := acme.Topics().Create(*orders, 0); err != nil {
		t.Fatal(err)
	}
	if err := acme.Namespaces().GrantNamespacePermission(*ns, "writer", []utils.AuthAction{"produce"}); err != nil {
		t.Fatal(err)
	}
	if err := acme.Topics().GrantPermission(*orders, "reader", []utils.AuthAction{"consume"}); err != nil {
		t.Fatal(err)
	}
	if err := acme.Topics().GrantPermission(*orders, "auditor", []utils.AuthAction{"consume"}); err != nil {
		t.Fatal(err)
	}
	if err := acme.Namespaces().GrantSubPermission(*ns, "billing", []string{"reader"}); err != nil {
		t.Fatal(err)
	}
	forbidden("a writer granting itself consume", admin("writer").Topics().GrantPermission(*orders, "writer", []utils.AuthAction{"consume"}))

	perms, err := acme.Topics().GetPermissions(*orders)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(perms["writer"], []utils.AuthAction{"produce"}) || !slices.Equal(perms["reader"], []utils.AuthAction{"consume"}) {
		t.Errorf("topic permissions %v", perms)
	}
	nsPerms, err := acme.Namespaces().GetNamespacePermissions(*ns)
	if err != nil || len(nsPerms) != 1 || !slices.Equal(nsPerms["writer"], []utils.AuthAction{"produce"}) {
		t.Errorf("namespace permissions %v %v", nsPerms, err)
	}
	subPerms, err := acme.Namespaces().GetSubPermissions(*ns)
	if err != nil || !slices.Equal(subPerms["billing"], []string{"reader"}) {
		t.Errorf("subscription permissions %v %v", subPerms, err)
	}

	// The reader subscribes first (so the messages wait for it), the writer produces.
	reader := client("reader")
	cons, err := reader.Subscribe(pulsar.ConsumerOptions{Topic: orders.String(), SubscriptionName: "billing"})
	if err != nil {
		t.Fatalf("reader's subscription: %v", err)
	}
	defer cons.Close()
	_, err = reader.CreateProducer(pulsar.ProducerOptions{Topic: orders.String()})
	refused("the reader producing", err)
	_, err = client("auditor").Subscribe(pulsar.ConsumerOptions{Topic: orders.String(), SubscriptionName: "billing"})
	refused("the auditor on a subscription of other roles", err)

	writer := client("writer")
	prod, err := writer.CreateProducer(pulsar.ProducerOptions{Topic: orders.String()})
	if err != nil {
		t.Fatalf("writer's producer: %v", err)
	}
	defer prod.Close()
	for i := range 3 {
		if _, err := prod.Send(t.Context(), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint("order-", i))}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = writer.Subscribe(pulsar.ConsumerOptions{Topic: orders.String(), SubscriptionName: "mine"})
	refused("the writer consuming", err)
	for i := range 3 {
		m, err := cons.Receive(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Payload()) != fmt.Sprint("order-", i) {
			t.Fatalf("received %q", m.Payload())
		}
		_ = cons.Ack(m)
	}
	_, err = client("stranger").CreateProducer(pulsar.ProducerOptions{Topic: orders.String()})
	refused("a stranger producing", err)
	_, err = client("stranger").CreateProducer(pulsar.ProducerOptions{Topic: "persistent://public/default/x"})
	refused("a stranger producing to public/default", err)
	p2, err := client("ops").CreateProducer(pulsar.ProducerOptions{Topic: orders.String()})
	if err != nil {
		t.Fatalf("a superuser producing: %v", err)
	}
	p2.Close()

	// HTTP: lookups and stats follow the grants; 401 without credentials.
	for _, tc := range []struct {
		role string
		path string
		want int
	}{
		{"reader", "/lookup/v2/topic/persistent/acme/app/orders", 200},
		{"writer", "/admin/v2/persistent/acme/app/orders/stats", 200},
		{"stranger", "/lookup/v2/topic/persistent/acme/app/orders", 403},
		{"", "/lookup/v2/topic/persistent/acme/app/orders", 401},
		{"acme-admin", "/admin/v2/clusters/" + clusters[0], 403},
		// The console's page is public (no data; it asks for a token), its API is for superusers.
		{"", "/console/", 200},
		{"", "/console/api/overview", 401},
		{"acme-admin", "/console/api/overview", 403},
		{"root", "/console/api/overview", 200},
		{"", "/admin/v2/brokers/ready", 200},
	} {
		tok := ""
		if tc.role != "" {
			tok = token(tc.role)
		}
		if got := httpStatus(t, b, b.httpsURL, tc.path, tok); got != tc.want {
			t.Errorf("GET %s as %q: %d, want %d", tc.path, tc.role, got, tc.want)
		}
	}

	// Revoking the topic grant: the reader's new subscriptions are refused.
	if err := acme.Topics().RevokePermission(*orders, "reader"); err != nil {
		t.Fatal(err)
	}
	_, err = client("reader").Subscribe(pulsar.ConsumerOptions{Topic: orders.String(), SubscriptionName: "billing"})
	refused("the reader after the revocation", err)
}
