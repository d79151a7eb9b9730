package metadata

import (
	"fmt"
	"path"
	"strings"
)

// DefaultEtcdPrefix is the key prefix used inside etcd when the URL names none.
const DefaultEtcdPrefix = "/meridian"

// LocalFileName is the bbolt file of the local store inside the data dir.
const LocalFileName = "metadata.db"

// Location says which store a URL names.
type Location struct {
	// Kind is "local" (bbolt file in the data dir), "memory" (memstore; tests) or "etcd".
	Kind string
	// Endpoints are etcd's "host:port" client endpoints (Kind "etcd").
	Endpoints []string
	// Prefix is the key prefix inside etcd (Kind "etcd"): DefaultEtcdPrefix unless the URL names one.
	Prefix string
}

// ParseURL parses a metadata store URL:
//
//	""  or "local"                      the local store (bbolt file in the data dir)
//	"memory"                            an in-memory store (tests)
//	"etcd://h1:2379,h2:2379[/prefix]"   etcd; the prefix defaults to /meridian
func ParseURL(raw string) (Location, error) {
	raw = strings.TrimSpace(raw)
	switch raw {
	case "", "local", "local://":
		return Location{Kind: "local"}, nil
	case "memory", "memory://", "mem://":
		return Location{Kind: "memory"}, nil
	}
	rest, ok := strings.CutPrefix(raw, "etcd://")
	if !ok {
		return Location{}, fmt.Errorf("metadata store URL %q: want etcd://host:port[,host:port...][/prefix] or empty for the local store", raw)
	}
	hosts, prefix, _ := strings.Cut(rest, "/")
	if hosts == "" {
		return Location{}, fmt.Errorf("metadata store URL %q: no etcd endpoints", raw)
	}
	var endpoints []string
	for _, h := range strings.Split(hosts, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			return Location{}, fmt.Errorf("metadata store URL %q: empty endpoint", raw)
		}
		if !strings.Contains(h, ":") {
			h += ":2379"
		}
		endpoints = append(endpoints, h)
	}
	p := DefaultEtcdPrefix
	if prefix = strings.Trim(prefix, "/"); prefix != "" {
		p = path.Clean("/" + prefix)
		if err := ValidateKey(p); err != nil {
			return Location{}, fmt.Errorf("metadata store URL %q: bad prefix: %w", raw, err)
		}
	}
	return Location{Kind: "etcd", Endpoints: endpoints, Prefix: p}, nil
}
