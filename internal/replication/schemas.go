package replication

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/meridian-mq/meridian/adminapi"
	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/naming"
	"github.com/meridian-mq/meridian/internal/schema"
	"github.com/meridian-mq/meridian/internal/wire"
)

// Schemas are registered on the remote cluster before the data that uses them. Each cluster keeps its
// own schema registry, so a version number means nothing elsewhere: before an entry with a
// schema_version is sent, the replicator makes sure the remote has that schema (registering it
// through the remote's admin API when needed) and rewrites schema_version to the remote's version.
// This happens in the read step, so a registration failure is an ordinary retried read error,
// shown as lastError, and entries never overtake their schema.

// SchemaTranslator maps a local schema version of a topic to the remote cluster's version,
// registering the schema there if needed. ClientFactory implements it.
type SchemaTranslator interface {
	TranslateSchema(ctx context.Context, remote, topic string, localVersion []byte) ([]byte, error)
}

// translateSchemas rewrites the schema_version of every entry that will be sent to remote. Entries
// that are skipped anyway are left alone. es is read-only: the result is a copy when an entry
// changes, es itself otherwise (most topics have no schema).
func translateSchemas(ctx context.Context, tr SchemaTranslator, local, remote, topic string, es []mtypes.Entry) ([]mtypes.Entry, error) {
	copied := false
	for i, e := range es {
		parts, err := wire.ParseEntry(e.Data)
		if err != nil {
			continue // the machine reports it as corrupt
		}
		v, ok, err := schemaVersionOf(parts.Metadata)
		if err != nil || !ok {
			continue
		}
		s, err := scanMetadata(parts.Metadata, remote)
		if err != nil || s.hasReplicatedFrom || s.excludes() {
			continue
		}
		rv, err := tr.TranslateSchema(ctx, remote, topic, v)
		if err != nil {
			return es, fmt.Errorf("register schema version %x of %s on %s: %w", v, topic, remote, err)
		}
		if string(rv) == string(v) {
			continue
		}
		if !copied {
			es, copied = slices.Clone(es), true
		}
		es[i].Data = withSchemaVersion(parts, rv)
	}
	return es, nil
}

// schemaTagFirstByte is the first byte of schema_version's tag (field 16, bytes: varint 130),
// however long its encoding: metadata without this byte has no schema_version.
const schemaTagFirstByte = 0x82

// schemaVersionOf returns the last schema_version field of encoded metadata (proto2: last one wins).
func schemaVersionOf(md []byte) ([]byte, bool, error) {
	if bytes.IndexByte(md, schemaTagFirstByte) < 0 {
		// Most entries carry no schema version: one vectorised byte search instead of a scan of
		// every field (this runs for every entry read for a remote).
		return nil, false, nil
	}
	return scanSchemaVersion(md)
}

// scanSchemaVersion is schemaVersionOf scanning every field.
func scanSchemaVersion(md []byte) ([]byte, bool, error) {
	var out []byte
	found := false
	for len(md) > 0 {
		num, typ, n := wire.ConsumeTag(md)
		if n < 0 || num > protowire.MaxValidNumber { // protobuf refuses larger field numbers
			return nil, false, errScan
		}
		md = md[n:]
		if num == wire.MetadataField.SchemaVersion && typ == protowire.BytesType {
			v, n := wire.ConsumeBytes(md)
			if n < 0 {
				return nil, false, errScan
			}
			out, found = v, true
			md = md[n:]
			continue
		}
		n = wire.ConsumeFieldValue(num, typ, md)
		if n < 0 {
			return nil, false, errScan
		}
		md = md[n:]
	}
	return out, found && len(out) > 0, nil
}

// withSchemaVersion returns new entry bytes whose metadata ends with schema_version = v (which
// overrides an earlier occurrence) and a fresh checksum.
func withSchemaVersion(parts wire.EntryParts, v []byte) []byte {
	extra := protowire.SizeTag(wire.MetadataField.SchemaVersion) + protowire.SizeBytes(len(v))
	mdLen := len(parts.Metadata) + extra
	buf := make([]byte, 10, 10+mdLen+len(parts.Body))
	buf = append(buf, parts.Metadata...)
	buf = protowire.AppendTag(buf, wire.MetadataField.SchemaVersion, protowire.BytesType)
	buf = protowire.AppendBytes(buf, v)
	buf = append(buf, parts.Body...)
	binary.BigEndian.PutUint16(buf, wire.MagicCRC32C)
	binary.BigEndian.PutUint32(buf[6:], uint32(mdLen))
	binary.BigEndian.PutUint32(buf[2:], wire.Checksum(buf[6:]))
	return buf
}

// schemaCache remembers translations: (remote, base topic, local version) -> remote version.
type schemaCache struct {
	mu sync.Mutex
	m  map[string][]byte
}

// TranslateSchema implements SchemaTranslator through the admin APIs of both clusters: the schema is
// read from this cluster's registry and uploaded to the remote's (which answers with the existing
// version when it already has an identical schema).
func (f *ClientFactory) TranslateSchema(ctx context.Context, remote, topic string, localVersion []byte) ([]byte, error) {
	v, ok, err := schema.ParseVersion(localVersion)
	if err != nil || !ok {
		return nil, fmt.Errorf("schema version %x: %w", localVersion, errors.Join(err, errors.New("unparsable")))
	}
	tn, err := naming.ParseTopic(topic)
	if err != nil {
		return nil, err
	}
	base := tn.Base().String()
	key := remote + "\x00" + base + "\x00" + string(localVersion)
	f.schemas.mu.Lock()
	if rv, ok := f.schemas.m[key]; ok {
		f.schemas.mu.Unlock()
		return rv, nil
	}
	f.schemas.mu.Unlock()

	payload, err := f.localSchema(ctx, base, v)
	if err != nil {
		return nil, err
	}
	rc, err := f.remote(remote)
	if err != nil {
		return nil, err
	}
	if rc.link.adminURL == "" {
		return nil, fmt.Errorf("%w: %q has no serviceUrl to register schemas", ErrClusterNotRegistered, remote)
	}
	// The remote's admin API over the link's TLS and with its credentials (schema writes need the
	// tenant's admin there, or a superuser).
	ra, err := adminapi.NewClient(rc.link.adminURL, rc.link.httpClient(f.opts.HTTPClient))
	if err != nil {
		return nil, err
	}
	rv, err := ra.UploadSchema(ctx, base, payload)
	if err != nil {
		return nil, fmt.Errorf("upload schema of %s to %s: %w", base, remote, err)
	}
	out := schema.VersionBytes(rv)
	f.schemas.mu.Lock()
	if f.schemas.m == nil {
		f.schemas.m = map[string][]byte{}
	}
	f.schemas.m[key] = out
	f.schemas.mu.Unlock()
	return out, nil
}

// localSchema reads version v of base's schema here: in process when the factory has a reader,
// else through this cluster's admin API.
func (f *ClientFactory) localSchema(ctx context.Context, base string, v int64) (adminapi.SchemaPayload, error) {
	if f.opts.LocalSchemas != nil {
		p, err := f.opts.LocalSchemas(ctx, base, v)
		if err != nil {
			return p, fmt.Errorf("read schema version %d of %s here: %w", v, base, err)
		}
		return p, nil
	}
	localData, ok := f.opts.Clusters.Cluster(f.opts.Local)
	if !ok || localData.ServiceURL == "" {
		return adminapi.SchemaPayload{}, fmt.Errorf("%w: %q (this cluster) has no serviceUrl to read its schemas", ErrClusterNotRegistered, f.opts.Local)
	}
	la, err := adminapi.NewClient(localData.ServiceURL, f.opts.HTTPClient)
	if err != nil {
		return adminapi.SchemaPayload{}, err
	}
	sc, err := la.GetSchema(ctx, base, v)
	if err != nil {
		return adminapi.SchemaPayload{}, fmt.Errorf("read schema version %d of %s here: %w", v, base, err)
	}
	return adminapi.SchemaPayload{Type: sc.Type, Schema: sc.Data, Properties: sc.Properties}, nil
}
