package main

import (
	"io"
	"strings"
	"testing"

	"github.com/meridian-mq/meridian/internal/node"
)

// parseStandalone parses args as `meridian standalone` would and returns the node options.
func parseStandalone(t *testing.T, args ...string) ([]node.Options, error) {
	t.Helper()
	f := &standaloneFlags{}
	cmd := newStandaloneCommandFor(f)
	if err := cmd.ParseFlags(args); err != nil {
		return nil, err
	}
	return f.nodeOptions(nil, io.Discard)
}

func TestStandaloneDefaultsMatchTheContract(t *testing.T) {
	opts, err := parseStandalone(t)
	if err != nil {
		t.Fatal(err)
	}
	if len(opts) != 1 {
		t.Fatalf("got %d nodes", len(opts))
	}
	o := opts[0]
	checks := map[string][2]any{
		"cluster":                  {o.Cluster, "standalone"},
		"data-dir":                 {o.DataDir, "./data"},
		"broker-addr":              {o.BrokerAddr, "127.0.0.1:6650"},
		"web-addr":                 {o.WebAddr, "127.0.0.1:8080"},
		"advertised-address":       {o.AdvertisedAddress, ""},
		"config-store":             {o.ConfigStore, ""},
		"replication-start-at":     {o.ReplicationStartAt, node.ReplicationStartLatest},
		"max-message-size":         {o.MaxMessageSize, 5242880},
		"fsync":                    {o.Fsync, node.FsyncAlways},
		"fsync-pipeline":           {o.FsyncPipeline, 2},
		"direct-write-bytes":       {o.DirectWriteBytes, 1 << 20},
		"bypass-cache-bytes":       {o.BypassCacheBytes, 64 << 10},
		"replication-memory-bytes": {o.ReplicationMemoryBytes, int64(256 << 20)},
		"dedup":                    {o.Dedup, false},
		"auto-topic-creation":      {o.AutoTopicCreation, true},
		"plaintext":                {o.InsecureAllowPlaintext, false},
	}
	for flag, c := range checks {
		if c[0] != c[1] {
			t.Errorf("--%s default = %v, want %v", flag, c[0], c[1])
		}
	}
}

func TestStandaloneFlagsAreApplied(t *testing.T) {
	opts, err := parseStandalone(t,
		"--cluster", "east", "--data-dir", "/tmp/x", "--broker-addr", "0.0.0.0:7650", "--web-addr", "0.0.0.0:9080",
		"--advertised-address", "east.example.com", "--config-store", "etcd://h1:2379,h2:2379/meridian",
		"--replication-start-at", "earliest", "--max-message-size", "1048576", "--fsync", "interval",
		"--fsync-pipeline", "4", "--dedup", "--auto-topic-creation=false", "--insecure-allow-plaintext")
	if err != nil {
		t.Fatal(err)
	}
	o := opts[0]
	if o.Cluster != "east" || o.DataDir != "/tmp/x" || o.BrokerAddr != "0.0.0.0:7650" || o.WebAddr != "0.0.0.0:9080" ||
		o.AdvertisedAddress != "east.example.com" || o.ConfigStore != "etcd://h1:2379,h2:2379/meridian" ||
		o.ReplicationStartAt != node.ReplicationStartEarliest || o.MaxMessageSize != 1048576 || o.Fsync != node.FsyncInterval ||
		o.FsyncPipeline != 4 || !o.Dedup || o.AutoTopicCreation || !o.InsecureAllowPlaintext {
		t.Errorf("options not applied: %+v", o)
	}
}

func TestStandaloneRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--fsync", "sometimes"}, "--fsync"},
		{[]string{"--fsync-pipeline", "0"}, "--fsync-pipeline"},
		{[]string{"--fsync-pipeline", "17"}, "--fsync-pipeline"},
		{[]string{"--direct-write-bytes", "-1"}, "--direct-write-bytes"},
		{[]string{"--bypass-cache-bytes", "-1"}, "--bypass-cache-bytes"},
		{[]string{"--replication-start-at", "middle"}, "--replication-start-at"},
		{[]string{"--max-message-size", "10"}, "--max-message-size"},
		{[]string{"--cluster", "bad/name"}, "cluster"},
		{[]string{"--broker-addr", "nonsense"}, "--broker-addr"},
		{[]string{"--broker-addr", "0.0.0.0:6650", "--advertised-address", "h"}, "--insecure-allow-plaintext"},
		{[]string{"--broker-addr", "0.0.0.0:6650", "--insecure-allow-plaintext"}, "--advertised-address"},
		{[]string{"--config-store", "zk://h:2181"}, "--config-store"},
		{[]string{"--clusters", "a,b", "--cluster", "c"}, "--cluster cannot be combined"},
		{[]string{"--clusters", "a,a"}, "twice"},
		{[]string{"--clusters", "a"}, "at least two"},
		{[]string{"--clusters", "a,b", "--config-store", "etcd://h:2379"}, "--config-store"},
	} {
		_, err := parseStandalone(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one mentioning %q", tc.args, err, tc.want)
		}
	}
}

// TestByteThresholdFlags: for the byte flags where 0 on the command line means "never" (no direct
// writes, always the page cache, no replication memory bound), the node gets -1 (it reads 0 as "the
// default"); a number of bytes is passed on.
func TestByteThresholdFlags(t *testing.T) {
	for _, tc := range []struct {
		flag string
		get  func(node.Options) int64
		arg  string
		want int64
	}{
		{"direct-write-bytes", func(o node.Options) int64 { return int64(o.DirectWriteBytes) }, "0", -1},
		{"direct-write-bytes", func(o node.Options) int64 { return int64(o.DirectWriteBytes) }, "262144", 262144},
		{"bypass-cache-bytes", func(o node.Options) int64 { return int64(o.BypassCacheBytes) }, "0", -1},
		{"bypass-cache-bytes", func(o node.Options) int64 { return int64(o.BypassCacheBytes) }, "1048576", 1 << 20},
		{"replication-memory-bytes", func(o node.Options) int64 { return o.ReplicationMemoryBytes }, "0", -1},
		{"replication-memory-bytes", func(o node.Options) int64 { return o.ReplicationMemoryBytes }, "1073741824", 1 << 30},
	} {
		opts, err := parseStandalone(t, "--"+tc.flag, tc.arg)
		if err != nil {
			t.Fatal(err)
		}
		if got := tc.get(opts[0]); got != tc.want {
			t.Errorf("--%s %s: node option %d, want %d", tc.flag, tc.arg, got, tc.want)
		}
	}
}

func TestClustersModeShiftsPortsAndDataDirs(t *testing.T) {
	opts, err := parseStandalone(t, "--clusters", "a,b,c", "--data-dir", "/d")
	if err != nil {
		t.Fatal(err)
	}
	if len(opts) != 3 {
		t.Fatalf("got %d nodes", len(opts))
	}
	for i, want := range []struct{ name, dir, broker, web string }{
		{"a", "/d/a", "127.0.0.1:6650", "127.0.0.1:8080"},
		{"b", "/d/b", "127.0.0.1:6660", "127.0.0.1:8090"},
		{"c", "/d/c", "127.0.0.1:6670", "127.0.0.1:8100"},
	} {
		o := opts[i]
		if o.Cluster != want.name || o.DataDir != want.dir || o.BrokerAddr != want.broker || o.WebAddr != want.web {
			t.Errorf("cluster %d: %s %s %s %s, want %+v", i, o.Cluster, o.DataDir, o.BrokerAddr, o.WebAddr, want)
		}
	}
}
