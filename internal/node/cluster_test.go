package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBrokerIDFollowsTheDataDir: the first start records the id (the flag, else the advertised
// address); later starts reuse it, and a different --broker-id is refused, because the bundles
// recorded under the old id have their messages in this data dir.
func TestBrokerIDFollowsTheDataDir(t *testing.T) {
	dir := t.TempDir()
	id, err := resolveBrokerID(dir, "", "127.0.0.2:6650")
	if err != nil || id != "127.0.0.2:6650" {
		t.Fatalf("first start: %q, %v", id, err)
	}
	if id, err = resolveBrokerID(dir, "", "127.0.0.9:7000"); err != nil || id != "127.0.0.2:6650" {
		t.Fatalf("restart on other ports: %q, %v", id, err)
	}
	if _, err := resolveBrokerID(dir, "other", ""); err == nil || !strings.Contains(err.Error(), "belongs to broker 127.0.0.2:6650") {
		t.Fatalf("a different --broker-id: %v", err)
	}
	fresh := t.TempDir()
	if id, err := resolveBrokerID(fresh, "b7", "127.0.0.1:6650"); err != nil || id != "b7" {
		t.Fatalf("flag on a fresh dir: %q, %v", id, err)
	}
	if b, _ := os.ReadFile(filepath.Join(fresh, brokerIDFileName)); strings.TrimSpace(string(b)) != "b7" {
		t.Fatalf("recorded %q", b)
	}
	if _, err := resolveBrokerID(t.TempDir(), "", ""); err == nil {
		t.Fatal("no id and no address accepted")
	}
}
