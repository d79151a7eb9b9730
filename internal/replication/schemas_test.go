package replication

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

type fakeTranslator struct {
	calls int
	err   error
}

func (f *fakeTranslator) TranslateSchema(ctx context.Context, remote, topic string, v []byte) ([]byte, error) {
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	return []byte{0, 0, 0, 0, 0, 0, 0, v[7] + 10}, nil
}

func TestTranslateSchemas(t *testing.T) {
	withSchema := func(v byte, tweak func(*pulsarpb.MessageMetadata)) func(*pulsarpb.MessageMetadata) {
		return func(md *pulsarpb.MessageMetadata) {
			md.SchemaVersion = []byte{0, 0, 0, 0, 0, 0, 0, v}
			if tweak != nil {
				tweak(md)
			}
		}
	}
	es := []mtypes.Entry{
		mkEntry(t, mtypes.Position{LedgerID: 1, EntryID: 0}, "plain", nil),
		mkEntry(t, mtypes.Position{LedgerID: 1, EntryID: 1}, "v1", withSchema(1, nil)),
		mkEntry(t, mtypes.Position{LedgerID: 1, EntryID: 2}, "not-for-b", withSchema(2, func(md *pulsarpb.MessageMetadata) { md.ReplicateTo = []string{"c"} })),
	}
	orig := es[1].Data
	in := es
	tr := &fakeTranslator{}
	es, err := translateSchemas(context.Background(), tr, "a", "b", "persistent://t/n/x", es)
	if err != nil {
		t.Fatal(err)
	}
	if &in[1].Data[0] != &orig[0] {
		t.Fatal("the read-only input slice was edited")
	}
	// Nothing to translate: the input comes back as it is, no copy.
	plain := []mtypes.Entry{mkEntry(t, mtypes.Position{LedgerID: 1, EntryID: 0}, "plain", nil)}
	if got, err := translateSchemas(context.Background(), tr, "a", "b", "persistent://t/n/x", plain); err != nil || &got[0] != &plain[0] {
		t.Fatal("entries without schema copied", err)
	}
	if tr.calls != 1 {
		t.Fatalf("%d translations, want 1 (skipped entries need none)", tr.calls)
	}
	pe, err := ParseEntry(es[1].Data)
	if err != nil {
		t.Fatal(err)
	}
	if got := pe.Metadata.GetSchemaVersion(); len(got) != 8 || got[7] != 11 || string(pe.Payload) != "v1" {
		t.Fatalf("schema version %x payload %q", got, pe.Payload)
	}
	if &orig[0] == &es[1].Data[0] {
		t.Fatal("stored bytes edited in place")
	}
	// The rewritten entry still goes through the fast path and keeps its new version.
	out, reason, err := PrepareEntry(es[1], "a", "b")
	if err != nil || reason != SkipNone {
		t.Fatal(reason, err)
	}
	pe, _ = ParseEntry(out.Bytes())
	if pe.Metadata.GetSchemaVersion()[7] != 11 || pe.Metadata.GetReplicatedFrom() != "a" {
		t.Fatalf("prepared %v", pe.Metadata)
	}
	tr.err = errors.New("incompatible schema")
	es = []mtypes.Entry{mkEntry(t, mtypes.Position{LedgerID: 1, EntryID: 3}, "v1", withSchema(1, nil))}
	if _, err := translateSchemas(context.Background(), tr, "a", "b", "persistent://t/n/x", es); err == nil {
		t.Fatal("translation failure not reported")
	}
}

// The byte pre-check of schemaVersionOf never hides a schema version the full scan finds,
// whatever the encoding of the tag (overlong varints included).
func FuzzSchemaVersionPrecheck(f *testing.F) {
	withVersion, _ := proto.Marshal(&pulsarpb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1),
		PublishTime: proto.Uint64(1), SchemaVersion: []byte{0, 0, 0, 0, 0, 0, 0, 3}})
	without, _ := proto.Marshal(&pulsarpb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(1)})
	f.Add(withVersion)
	f.Add(without)
	f.Add([]byte{0x82, 0x81, 0x80, 0x00, 0x01, 0x07}) // tag 16/bytes as an overlong varint
	f.Fuzz(func(t *testing.T, md []byte) {
		want, wantOK, wantErr := scanSchemaVersion(md)
		got, gotOK, _ := schemaVersionOf(md)
		if wantErr == nil && (gotOK != wantOK || string(got) != string(want)) {
			t.Fatalf("pre-checked %x %v, scan %x %v", got, gotOK, want, wantOK)
		}
	})
}
