package localstore

import (
	"github.com/meridian-mq/meridian/internal/metadata"
	"github.com/meridian-mq/meridian/internal/metadata/internal/engine"
)

func encodeLogForTest(t metadata.EventType, key, value string, version int64) []byte {
	return encodeLog(engine.Change{Type: t, KV: metadata.KV{Key: key, Value: []byte(value), Version: version}})
}
