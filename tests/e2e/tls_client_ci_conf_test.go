package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/meridian-mq/meridian/tests/internal/harness"
)

// TestTLSClientCIStandaloneConf starts `meridian standalone --config` with the standalone.conf that
// pulsar-client-go's CI starts Pulsar with (from the client module in the Go module cache: TLS,
// the TLS, token and basic providers, authorization, brokerClient* defaults for outgoing links,
// and some 70 Pulsar keys of parts Meridian does not have), its /pulsar paths pointed at the
// module's certificates and tokens, and only the listeners moved to free loopback ports. The
// broker starts, every key it ignores is one it knows (no warning about unknown keys), and clients
// authenticate with the client's own credentials: its certificate (CN admin, a superuser), its
// token of token-principal (granted produce on private/auth, as the client's CI script grants),
// and basic admin:123456.
func TestTLSClientCIStandaloneConf(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/apache/pulsar-client-go").Output()
	if err != nil {
		t.Fatalf("locating pulsar-client-go in the module cache: %v", err)
	}
	it := filepath.Join(strings.TrimSpace(string(out)), "integration-tests")
	conf, err := os.ReadFile(filepath.Join(it, "conf", "standalone.conf"))
	if err != nil {
		t.Fatal(err)
	}
	tlsAddr, httpsAddr := harness.FreeAddr(t), harness.FreeAddr(t)
	text := strings.NewReplacer("/pulsar/certs", filepath.Join(it, "certs"), "/pulsar/tokens", filepath.Join(it, "tokens")).Replace(string(conf)) +
		fmt.Sprintf("\n# the test's changes: the htpasswd file (a system property in the client's CI) and free loopback ports\nbasicAuthConf=%s\nbindAddress=127.0.0.1\nbrokerServicePortTls=%s\nwebServicePortTls=%s\n",
			filepath.Join(it, "conf", ".htpasswd"), port(t, tlsAddr), port(t, httpsAddr))
	confFile := filepath.Join(t.TempDir(), "standalone.conf")
	if err := os.WriteFile(confFile, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	b := harness.StartStandalone(t, harness.Options{Cluster: "standalone", ExtraArgs: []string{"--config", confFile}})
	logs := b.Logs()
	if !strings.Contains(logs, "configuration keys Meridian does not use; ignored") || strings.Contains(logs, "neither Meridian's nor Pulsar keys") {
		t.Errorf("the client CI's keys are not all known:\n%s", logs)
	}

	// The grants of the client's scripts/pulsar-test-service-start.sh, as superuser admin (token).
	adminToken, err := os.ReadFile(filepath.Join(it, "tokens", "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []struct{ method, path, body string }{
		{http.MethodPut, "/admin/v2/tenants/private", `{"allowedClusters":["standalone"]}`},
		{http.MethodPut, "/admin/v2/namespaces/private/auth", ""},
		{http.MethodPost, "/admin/v2/namespaces/private/auth/permissions/token-principal", `["produce","consume"]`},
	} {
		r, _ := http.NewRequest(req.method, b.WebURL()+req.path, strings.NewReader(req.body))
		r.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(adminToken)))
		r.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("%s %s: %d", req.method, req.path, resp.StatusCode)
		}
	}

	basic, err := pulsar.NewAuthenticationBasic("admin", "123456")
	if err != nil {
		t.Fatal(err)
	}
	tlsURL := "pulsar+ssl://localhost:" + port(t, tlsAddr) // the broker's certificate names localhost
	for name, auth := range map[string]pulsar.Authentication{
		"client certificate": pulsar.NewAuthenticationTLS(filepath.Join(it, "certs", "client-cert.pem"), filepath.Join(it, "certs", "client-key.pem")),
		"token":              pulsar.NewAuthenticationTokenFromFile(filepath.Join(it, "tokens", "token.txt")),
		"basic":              basic,
	} {
		c, err := tlsClient(t, tlsURL, filepath.Join(it, "certs", "cacert.pem"), func(o *pulsar.ClientOptions) { o.Authentication = auth })
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://private/auth/ci-conf"})
		if err != nil {
			t.Fatalf("%s: producer on private/auth: %v", name, err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		_, err = p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(name)})
		cancel()
		p.Close()
		if err != nil {
			t.Fatalf("%s: send: %v", name, err)
		}
	}
}
