package naming

import (
	"errors"
	"testing"
)

func TestParseTopic(t *testing.T) {
	cases := []struct {
		in, full, storage string
		partition         int
	}{
		{"t", "persistent://public/default/t", "public/default/persistent/t", -1},
		{"acme/orders/t", "persistent://acme/orders/t", "acme/orders/persistent/t", -1},
		{"persistent://acme/orders/t-partition-3", "persistent://acme/orders/t-partition-3", "acme/orders/persistent/t-partition-3", 3},
		{"non-persistent://a/b/c", "non-persistent://a/b/c", "a/b/non-persistent/c", -1},
		{"t-partition-x", "persistent://public/default/t-partition-x", "public/default/persistent/t-partition-x", -1},
		{"t-partition-07", "persistent://public/default/t-partition-07", "public/default/persistent/t-partition-07", -1},
		{"my.topic:v1=2", "persistent://public/default/my.topic:v1=2", "public/default/persistent/my.topic:v1=2", -1},
	}
	for _, c := range cases {
		got, err := ParseTopic(c.in)
		if err != nil {
			t.Fatalf("ParseTopic(%q): %v", c.in, err)
		}
		if got.String() != c.full || got.StorageName() != c.storage || got.PartitionIndex != c.partition {
			t.Errorf("ParseTopic(%q) = %s / %s / %d; want %s / %s / %d", c.in, got, got.StorageName(), got.PartitionIndex, c.full, c.storage, c.partition)
		}
	}
}

func TestParseTopicRejects(t *testing.T) {
	for _, in := range []string{"", "a/b", "a/b/c/d", "persistent://a/b", "persistent://a/b/c/d", "kafka://a/b/c",
		"persistent://a/b/", "persistent:///b/c", "persistent://a b/ns/t", "a/ns!/t", "persistent://a/b/c\x00",
		"public/default/a b", "a\tb", "persistent://public/default/t\u00a0", "t\u2028"} {
		if _, err := ParseTopic(in); !errors.Is(err, ErrInvalidName) {
			t.Errorf("ParseTopic(%q) error = %v; want ErrInvalidName", in, err)
		}
	}
}

func TestPartitions(t *testing.T) {
	base, err := ParseTopic("persistent://acme/orders/t")
	if err != nil {
		t.Fatal(err)
	}
	p := base.Partition(2)
	if p.String() != "persistent://acme/orders/t-partition-2" || !p.IsPartition() || p.PartitionIndex != 2 {
		t.Fatalf("Partition(2) = %+v", p)
	}
	if p.Base() != base {
		t.Fatalf("Base() = %+v; want %+v", p.Base(), base)
	}
	if p.Partition(5).String() != "persistent://acme/orders/t-partition-5" {
		t.Fatalf("Partition of a partition = %s", p.Partition(5))
	}
}

func TestParseNamespace(t *testing.T) {
	ns, err := ParseNamespace("public/default")
	if err != nil || ns.String() != "public/default" {
		t.Fatalf("ParseNamespace = %v, %v", ns, err)
	}
	for _, in := range []string{"", "public", "a/b/c", "/b", "a/", "a b/c"} {
		if _, err := ParseNamespace(in); !errors.Is(err, ErrInvalidName) {
			t.Errorf("ParseNamespace(%q) error = %v; want ErrInvalidName", in, err)
		}
	}
	if err := ValidateCluster("us-east_1"); err != nil {
		t.Fatal(err)
	}
	if err := ValidateCluster("us/east"); err == nil {
		t.Fatal("cluster with '/' accepted")
	}
}

func FuzzParseTopic(f *testing.F) {
	for _, s := range []string{"t", "a/b/c", "persistent://a/b/c-partition-1", "non-persistent://x/y/z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tn, err := ParseTopic(s)
		if err != nil {
			return
		}
		again, err := ParseTopic(tn.String())
		if err != nil || again != tn {
			t.Fatalf("round trip of %q: %+v, %v; want %+v", s, again, err, tn)
		}
	})
}
