package replication

import (
	"errors"
	"fmt"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/mtypes"
	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// A replicated subscription's state marker (docs/replication-design.md, "The state marker"): an
// entry of the topic's own log with marker_type SubscriptionStateMarker whose body is the
// subscription's whole acknowledgement state in origin coordinates. Replicators forward it in
// order with the data; dispatchers never deliver it.

// SubscriptionStateMarker is the marker_type of a state marker (Pulsar uses 10-13 for its
// replicated-subscription markers and 20-22 for transactions).
const SubscriptionStateMarker = 1000

// Bounds of a state marker, enforced by the writer (which drops the highest ranges and batches:
// their messages are delivered again after a move, never skipped) and checked again by the reader.
const (
	maxStateOrigins    = 64
	maxStateRanges     = 16384
	maxStateBatches    = 1024
	maxStateBodyBytes  = 256 << 10
	subStateVersion    = 1
	maxStateBatchWords = (wire.MaxBatchMessages + 63) / 64
)

// OriginAcks are the acknowledged entries of one origin key: sorted, disjoint ranges and partial
// batches, in that origin's positions.
type OriginAcks struct {
	Key     OriginKey
	Ranges  []mtypes.PositionRange
	Batches []mtypes.BatchAck
}

// SubscriptionState is the body of a state marker.
type SubscriptionState struct {
	Subscription string
	Type         mtypes.SubType
	Properties   map[string]string
	Source       string // the cluster that took the state
	TakenMs      int64  // the source's clock when it took the state
	Seq          uint64 // increasing per subscription within one source process
	Origins      []OriginAcks
	// Final: no consumer was attached on the source when it took the state (the consumer left:
	// nothing changes there until one attaches again).
	Final bool
}

// Field numbers of the body (this repository's, not Pulsar's).
const (
	fsSubscription = 1
	fsType         = 2
	fsProperty     = 3
	fsSource       = 4
	fsTaken        = 5
	fsSeq          = 6
	fsOrigin       = 7
	fsVersion      = 8
	fsFinal        = 9

	foCluster     = 1
	foIncarnation = 2
	foRanges      = 3
	foBatch       = 4

	fbLedger = 1
	fbEntry  = 2
	fbSize   = 3
	fbAcked  = 4
)

// errStateMarker is wrapped by every error of DecodeSubscriptionState.
var errStateMarker = errors.New("replication: malformed subscription state marker")

// EncodeSubscriptionState encodes st as a marker body. It checks the bounds a reader enforces.
func EncodeSubscriptionState(st SubscriptionState) ([]byte, error) {
	if err := checkStateBounds(st); err != nil {
		return nil, err
	}
	var b []byte
	b = protowire.AppendTag(b, fsVersion, protowire.VarintType)
	b = protowire.AppendVarint(b, subStateVersion)
	b = protowire.AppendTag(b, fsSubscription, protowire.BytesType)
	b = protowire.AppendString(b, st.Subscription)
	b = protowire.AppendTag(b, fsType, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(st.Type))
	keys := make([]string, 0, len(st.Properties))
	for k := range st.Properties {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		var p []byte
		p = protowire.AppendTag(p, 1, protowire.BytesType)
		p = protowire.AppendString(p, k)
		p = protowire.AppendTag(p, 2, protowire.BytesType)
		p = protowire.AppendString(p, st.Properties[k])
		b = protowire.AppendTag(b, fsProperty, protowire.BytesType)
		b = protowire.AppendBytes(b, p)
	}
	b = protowire.AppendTag(b, fsSource, protowire.BytesType)
	b = protowire.AppendString(b, st.Source)
	b = protowire.AppendTag(b, fsTaken, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(st.TakenMs))
	b = protowire.AppendTag(b, fsSeq, protowire.VarintType)
	b = protowire.AppendVarint(b, st.Seq)
	if st.Final {
		b = protowire.AppendTag(b, fsFinal, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	for _, o := range st.Origins {
		var ob []byte
		ob = protowire.AppendTag(ob, foCluster, protowire.BytesType)
		ob = protowire.AppendString(ob, o.Key.Cluster)
		ob = protowire.AppendTag(ob, foIncarnation, protowire.Fixed64Type)
		ob = protowire.AppendFixed64(ob, o.Key.Incarnation)
		if len(o.Ranges) > 0 {
			ob = protowire.AppendTag(ob, foRanges, protowire.BytesType)
			ob = protowire.AppendBytes(ob, encodeRanges(o.Ranges))
		}
		for _, ba := range o.Batches {
			var bb []byte
			bb = protowire.AppendTag(bb, fbLedger, protowire.VarintType)
			bb = protowire.AppendVarint(bb, uint64(ba.Position.LedgerID))
			bb = protowire.AppendTag(bb, fbEntry, protowire.VarintType)
			bb = protowire.AppendVarint(bb, uint64(ba.Position.EntryID))
			bb = protowire.AppendTag(bb, fbSize, protowire.VarintType)
			bb = protowire.AppendVarint(bb, uint64(ba.Size))
			var words []byte
			for _, w := range ba.Acked {
				words = protowire.AppendFixed64(words, w)
			}
			bb = protowire.AppendTag(bb, fbAcked, protowire.BytesType)
			bb = protowire.AppendBytes(bb, words)
			ob = protowire.AppendTag(ob, foBatch, protowire.BytesType)
			ob = protowire.AppendBytes(ob, bb)
		}
		b = protowire.AppendTag(b, fsOrigin, protowire.BytesType)
		b = protowire.AppendBytes(b, ob)
	}
	if len(b) > maxStateBodyBytes {
		return nil, fmt.Errorf("replication: subscription state of %q encodes to %d bytes, above %d", st.Subscription, len(b), maxStateBodyBytes)
	}
	return b, nil
}

// checkStateBounds checks what a reader refuses.
func checkStateBounds(st SubscriptionState) error {
	if !st.Type.Valid() {
		return fmt.Errorf("%w: subscription type %d", errStateMarker, st.Type)
	}
	if len(st.Origins) > maxStateOrigins {
		return fmt.Errorf("%w: %d origins, at most %d", errStateMarker, len(st.Origins), maxStateOrigins)
	}
	ranges, batches := 0, 0
	for _, o := range st.Origins {
		ranges += len(o.Ranges)
		batches += len(o.Batches)
		for i, r := range o.Ranges {
			if r.From.Compare(r.To) > 0 || (r.From != mtypes.Earliest && (r.From.LedgerID < 0 || r.From.EntryID < 0)) || r.To.LedgerID < 0 || r.To.EntryID < 0 {
				return fmt.Errorf("%w: range %v..%v", errStateMarker, r.From, r.To)
			}
			if i > 0 && r.From.Compare(o.Ranges[i-1].To) <= 0 {
				return fmt.Errorf("%w: ranges not sorted and disjoint at %v", errStateMarker, r.From)
			}
		}
		for _, ba := range o.Batches {
			if ba.Size <= 0 || ba.Size > wire.MaxBatchMessages || len(ba.Acked) > (ba.Size+63)/64 || ba.Position.LedgerID < 0 || ba.Position.EntryID < 0 {
				return fmt.Errorf("%w: batch at %v of size %d with %d words", errStateMarker, ba.Position, ba.Size, len(ba.Acked))
			}
		}
	}
	if ranges > maxStateRanges || batches > maxStateBatches {
		return fmt.Errorf("%w: %d ranges and %d batches, at most %d and %d", errStateMarker, ranges, batches, maxStateRanges, maxStateBatches)
	}
	if err := wire.CheckProperties("subscription", st.Properties); err != nil {
		return fmt.Errorf("%w: %w", errStateMarker, err)
	}
	return nil
}

// encodeRanges writes 4 zigzag varints per range, as deltas (docs/replication-design.md).
func encodeRanges(rs []mtypes.PositionRange) []byte {
	var b []byte
	prev := mtypes.Position{}
	for _, r := range rs {
		fe := r.From.EntryID
		if r.From.LedgerID == prev.LedgerID {
			fe -= prev.EntryID
		}
		te := r.To.EntryID
		if r.To.LedgerID == r.From.LedgerID {
			te -= r.From.EntryID
		}
		b = protowire.AppendVarint(b, protowire.EncodeZigZag(r.From.LedgerID-prev.LedgerID))
		b = protowire.AppendVarint(b, protowire.EncodeZigZag(fe))
		b = protowire.AppendVarint(b, protowire.EncodeZigZag(r.To.LedgerID-r.From.LedgerID))
		b = protowire.AppendVarint(b, protowire.EncodeZigZag(te))
		prev = r.To
	}
	return b
}

func decodeRanges(b []byte) ([]mtypes.PositionRange, error) {
	var out []mtypes.PositionRange
	prev := mtypes.Position{}
	next := func() (int64, error) {
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return 0, fmt.Errorf("%w: truncated range", errStateMarker)
		}
		b = b[n:]
		return protowire.DecodeZigZag(v), nil
	}
	for len(b) > 0 {
		if len(out) == maxStateRanges {
			return nil, fmt.Errorf("%w: more than %d ranges", errStateMarker, maxStateRanges)
		}
		var v [4]int64
		for i := range v {
			x, err := next()
			if err != nil {
				return nil, err
			}
			v[i] = x
		}
		var r mtypes.PositionRange
		r.From.LedgerID = prev.LedgerID + v[0]
		r.From.EntryID = v[1]
		if r.From.LedgerID == prev.LedgerID {
			r.From.EntryID += prev.EntryID
		}
		r.To.LedgerID = r.From.LedgerID + v[2]
		r.To.EntryID = v[3]
		if r.To.LedgerID == r.From.LedgerID {
			r.To.EntryID += r.From.EntryID
		}
		out = append(out, r)
		prev = r.To
	}
	return out, nil
}

// DecodeSubscriptionState decodes a marker body and checks its bounds; a body of a later version
// or beyond the bounds is an error.
func DecodeSubscriptionState(b []byte) (SubscriptionState, error) {
	var st SubscriptionState
	if len(b) > maxStateBodyBytes {
		return st, fmt.Errorf("%w: %d bytes, at most %d", errStateMarker, len(b), maxStateBodyBytes)
	}
	version := uint64(0)
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v uint64, bs []byte) error {
		switch {
		case num == fsVersion && typ == protowire.VarintType:
			version = v
		case num == fsSubscription && typ == protowire.BytesType:
			st.Subscription = string(bs)
		case num == fsType && typ == protowire.VarintType:
			st.Type = mtypes.SubType(v)
		case num == fsProperty && typ == protowire.BytesType:
			var k, val string
			if err := eachField(bs, func(n protowire.Number, t protowire.Type, _ uint64, s []byte) error {
				if t == protowire.BytesType && n == 1 {
					k = string(s)
				} else if t == protowire.BytesType && n == 2 {
					val = string(s)
				}
				return nil
			}); err != nil {
				return err
			}
			if st.Properties == nil {
				st.Properties = map[string]string{}
			}
			if len(st.Properties) > wire.MaxProperties {
				return fmt.Errorf("%w: too many properties", errStateMarker)
			}
			st.Properties[k] = val
		case num == fsSource && typ == protowire.BytesType:
			st.Source = string(bs)
		case num == fsTaken && typ == protowire.VarintType:
			st.TakenMs = int64(v)
		case num == fsSeq && typ == protowire.VarintType:
			st.Seq = v
		case num == fsFinal && typ == protowire.VarintType:
			st.Final = v != 0
		case num == fsOrigin && typ == protowire.BytesType:
			if len(st.Origins) == maxStateOrigins {
				return fmt.Errorf("%w: more than %d origins", errStateMarker, maxStateOrigins)
			}
			o, err := decodeOrigin(bs)
			if err != nil {
				return err
			}
			st.Origins = append(st.Origins, o)
		}
		return nil
	})
	if err != nil {
		return SubscriptionState{}, err
	}
	if version != subStateVersion {
		return SubscriptionState{}, fmt.Errorf("%w: version %d, this build reads %d", errStateMarker, version, subStateVersion)
	}
	if err := checkStateBounds(st); err != nil {
		return SubscriptionState{}, err
	}
	return st, nil
}

func decodeOrigin(b []byte) (OriginAcks, error) {
	var o OriginAcks
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v uint64, bs []byte) error {
		switch {
		case num == foCluster && typ == protowire.BytesType:
			o.Key.Cluster = string(bs)
		case num == foIncarnation && typ == protowire.Fixed64Type:
			o.Key.Incarnation = v
		case num == foRanges && typ == protowire.BytesType:
			rs, err := decodeRanges(bs)
			if err != nil {
				return err
			}
			o.Ranges = append(o.Ranges, rs...)
		case num == foBatch && typ == protowire.BytesType:
			if len(o.Batches) == maxStateBatches {
				return fmt.Errorf("%w: more than %d batches", errStateMarker, maxStateBatches)
			}
			var ba mtypes.BatchAck
			if err := eachField(bs, func(n protowire.Number, t protowire.Type, x uint64, s []byte) error {
				switch {
				case n == fbLedger && t == protowire.VarintType:
					ba.Position.LedgerID = int64(x)
				case n == fbEntry && t == protowire.VarintType:
					ba.Position.EntryID = int64(x)
				case n == fbSize && t == protowire.VarintType:
					if x > wire.MaxBatchMessages {
						return fmt.Errorf("%w: batch of %d messages", errStateMarker, x)
					}
					ba.Size = int(x)
				case n == fbAcked && t == protowire.BytesType:
					if len(s)%8 != 0 || len(s)/8 > maxStateBatchWords {
						return fmt.Errorf("%w: batch bitmap of %d bytes", errStateMarker, len(s))
					}
					for ; len(s) > 0; s = s[8:] {
						w, _ := protowire.ConsumeFixed64(s)
						ba.Acked = append(ba.Acked, w)
					}
				}
				return nil
			}); err != nil {
				return err
			}
			o.Batches = append(o.Batches, ba)
		}
		return nil
	})
	return o, err
}

// eachField calls fn for every field of a protobuf message: v for varint and fixed64 fields, bs
// for length-delimited ones; other wire types are skipped.
func eachField(b []byte, fn func(num protowire.Number, typ protowire.Type, v uint64, bs []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: bad tag", errStateMarker)
		}
		b = b[n:]
		var v uint64
		var bs []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.Fixed64Type:
			v, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			bs, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("%w: truncated field %d", errStateMarker, num)
		}
		b = b[n:]
		if err := fn(num, typ, v, bs); err != nil {
			return err
		}
	}
	return nil
}

// EncodeStateMarkerEntry builds the entry of a state marker: metadata with producer
// "pulsar.marker", sequence id 0, marker_type SubscriptionStateMarker, and body as its payload.
func EncodeStateMarkerEntry(body []byte, publishTimeMs int64) ([]byte, error) {
	md := &pulsarpb.MessageMetadata{
		ProducerName: proto.String(wire.MarkerProducerName),
		SequenceId:   proto.Uint64(0),
		PublishTime:  proto.Uint64(uint64(max(publishTimeMs, 0))),
		MarkerType:   proto.Int32(SubscriptionStateMarker),
	}
	return wire.EncodeEntry(md, body)
}

// DecodeStateMarkerEntry returns the state carried by a stored entry and the cluster it was
// replicated from; ok is false for an entry that is not a state marker.
func DecodeStateMarkerEntry(entry []byte) (st SubscriptionState, replicatedFrom string, ok bool, err error) {
	parts, err := wire.ParseEntry(entry)
	if err != nil {
		return st, "", false, err
	}
	md, err := wire.DecodeMetadata(entry)
	if err != nil {
		return st, "", false, err
	}
	if md.GetMarkerType() != SubscriptionStateMarker {
		return st, "", false, nil
	}
	st, err = DecodeSubscriptionState(parts.Body)
	return st, md.GetReplicatedFrom(), true, err
}
