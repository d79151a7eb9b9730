package replication

import (
	"fmt"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/wire"
)

// entrySource is the origin of a replicated entry as the index reads it from its metadata.
type entrySource struct {
	cluster     []byte // aliases the entry
	incarnation uint64
	pos         mtypes.Position
	msgs        int64
}

// replicatedSource extracts the origin of a replicated entry without decoding its metadata into a
// message (this runs for every replicated SEND).
func replicatedSource(data []byte) (src entrySource, indexed bool, err error) {
	parts, err := wire.ParseEntry(data)
	if err != nil {
		return entrySource{}, false, fmt.Errorf("replication: replicated entry: %w", err)
	}
	s, err := scanMetadata(parts.Metadata, "")
	if err != nil {
		return entrySource{}, false, fmt.Errorf("replication: replicated entry: malformed metadata")
	}
	return originSource(wire.ReplicatedOrigin{From: s.replicatedFrom, HasFrom: s.hasReplicatedFrom,
		Position: s.sourcePosition, HasPosition: s.hasSourcePosition, Incarnation: s.sourceIncarnation, HasIncarnation: s.hasIncarnation,
		NumMessages: s.numMessages, HasNumMessages: s.hasNumMessages})
}

// originSource is replicatedSource of an entry whose metadata was scanned.
func originSource(o wire.ReplicatedOrigin) (src entrySource, indexed bool, err error) {
	if !o.HasFrom || !o.HasPosition {
		return entrySource{}, false, nil
	}
	src.cluster = o.From
	src.pos, err = parsePositionBytes(o.Position)
	if err != nil {
		return entrySource{}, false, fmt.Errorf("replication: replicated entry from %s: %w", o.From, err)
	}
	if o.HasIncarnation {
		// Absent (Pulsar, ledgers older than incarnations): incarnation 0.
		if src.incarnation, err = wire.ParseIncarnation(o.Incarnation); err != nil {
			return entrySource{}, false, fmt.Errorf("replication: replicated entry from %s: %w", o.From, err)
		}
	}
	src.msgs = int64(o.NumMessages)
	if !o.HasNumMessages || src.msgs < 1 {
		src.msgs = 1
	}
	return src, true, nil
}
