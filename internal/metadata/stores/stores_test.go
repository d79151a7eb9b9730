package stores_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/meridian-mq/meridian/internal/metadata"
	"github.com/meridian-mq/meridian/internal/metadata/etcdstore"
	"github.com/meridian-mq/meridian/internal/metadata/etcdstore/etcdtest"
	"github.com/meridian-mq/meridian/internal/metadata/stores"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
	)
}

func TestOpenLocal(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	ctx := context.Background()
	s, err := stores.Open(ctx, "", dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "/a", []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = stores.Open(ctx, "local", dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if kv, err := s.Get(ctx, "/a"); err != nil || string(kv.Value) != "1" {
		t.Fatalf("reopened local store: %+v %v", kv, err)
	}
}

func TestOpenEtcdWithPrefix(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	s, err := stores.Open(ctx, srv.URL("/cfg"), "")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Put(ctx, "/admin/clusters/east", []byte("{}"), 0); err != nil {
		t.Fatal(err)
	}
	es := s.(*etcdstore.Store)
	raw, err := es.Client().Get(ctx, "/cfg/admin/clusters/east")
	if err != nil || len(raw.Kvs) != 1 {
		t.Fatalf("key not under /cfg: %v %v", raw, err)
	}
	if es.Prefix() != "/cfg" {
		t.Fatalf("prefix %q", es.Prefix())
	}
	d, err := stores.Open(ctx, srv.URL(""), "")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.(*etcdstore.Store).Prefix() != metadata.DefaultEtcdPrefix {
		t.Fatalf("default prefix %q", d.(*etcdstore.Store).Prefix())
	}
}

func TestOpenBadURL(t *testing.T) {
	for _, u := range []string{"zk://h:2181", "etcd://", "etcd://h:1,,h:2"} {
		if _, err := stores.Open(context.Background(), u, t.TempDir()); err == nil {
			t.Errorf("Open(%q) succeeded", u)
		}
	}
	if _, err := stores.Open(context.Background(), "", ""); err == nil {
		t.Errorf("local store without a data dir opened")
	}
	_, err := stores.Open(context.Background(), "memory", "")
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(metadata.ValidateKey("x"), metadata.ErrInvalidKey) {
		t.Fatal("ValidateKey")
	}
}
