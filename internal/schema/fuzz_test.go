package schema

import (
	"context"
	"testing"

	"github.com/meridian-mq/meridian/internal/metadata/memstore"
	"github.com/meridian-mq/meridian/internal/naming"
)

// FuzzCompatible feeds arbitrary definitions (clients control them) to the compatibility check:
// it must answer, never panic.
func FuzzCompatible(f *testing.F) {
	f.Add([]byte(userV1), []byte(userV2), int32(TypeAvro), 5)
	f.Add([]byte(userV1), []byte(`{"type":"enum","name":"E","symbols":["A"]}`), int32(TypeJSON), 6)
	f.Add([]byte(`{"type":"array","items":{"type":"map","values":["null","long"]}}`), []byte(`"string"`), int32(TypeProtobuf), 8)
	f.Fuzz(func(t *testing.T, old, cand []byte, ty int32, strategy int) {
		s := Strategy(strategy % 9)
		if s < 0 {
			s = -s
		}
		live := []Version{{Info: Info{Type: Type(ty), Data: old}}}
		_ = Compatible(s, live, Info{Type: Type(ty), Data: cand})
		_ = Validate(Info{Type: Type(ty), Data: cand})
	})
}

// FuzzStoredRecord puts arbitrary bytes where a stored version lives: reading the history must
// report an error, never panic.
func FuzzStoredRecord(f *testing.F) {
	f.Add([]byte(`{"v":1,"type":4,"data":"e30=","ts":1}`))
	f.Add([]byte(`{"v":2}`))
	f.Add([]byte(`not json`))
	tp, _ := naming.ParseTopic("fuzz")
	f.Fuzz(func(t *testing.T, value []byte) {
		ctx := context.Background()
		store := memstore.New()
		defer store.Close()
		if len(value) > 1<<16 {
			return
		}
		if _, err := store.Put(ctx, versionKey(tp, 0), value, -1); err != nil {
			return
		}
		r := New(store, Options{})
		_, _ = r.History(ctx, tp)
		_, _ = r.Latest(ctx, tp)
		_, _ = r.Get(ctx, tp, 0)
		_, _ = r.Put(ctx, tp, Info{Type: TypeString})
	})
}
