package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// Protocol constants.
const (
	// ProtocolVersion is the protocol revision Meridian speaks.
	ProtocolVersion = int32(pulsarpb.ProtocolVersion_v20)
	// MagicCRC32C starts a payload that carries a checksum.
	MagicCRC32C uint16 = 0x0e01
	// MagicBrokerEntryMetadata starts the broker entry metadata prefix of a MESSAGE payload.
	MagicBrokerEntryMetadata uint16 = 0x0e02
	// DefaultMaxMessageSize is Pulsar's default max message size (5 MiB).
	DefaultMaxMessageSize = 5 * 1024 * 1024
	// FramePadding is what a frame may carry beyond the max message size (command, sizes, metadata).
	FramePadding = 10 * 1024
	// DefaultMaxFrameSize is MaxFrameSize(DefaultMaxMessageSize).
	DefaultMaxFrameSize = DefaultMaxMessageSize + FramePadding
)

// Message-id sentinels used on the wire.
const (
	// EntryIDNone (-1 as int64) in a cumulative ack or start id means "before the first entry of
	// that ledger".
	EntryIDNone uint64 = math.MaxUint64
	// EarliestLedgerID / EarliestEntryID: SUBSCRIBE.start_message_id for "earliest".
	EarliestLedgerID uint64 = math.MaxUint64
	EarliestEntryID  uint64 = math.MaxUint64
	// LatestLedgerID / LatestEntryID: SUBSCRIBE.start_message_id for "latest".
	LatestLedgerID uint64 = math.MaxInt64
	LatestEntryID  uint64 = math.MaxInt64
)

// MaxFrameSize is the largest totalSize a peer accepts for a given max message size.
func MaxFrameSize(maxMessageSize int) int { return maxMessageSize + FramePadding }

// Decoding errors. See the package documentation for which ones leave the stream usable.
var (
	ErrFrameTooLarge    = errors.New("wire: frame exceeds maximum size")
	ErrMalformedFrame   = errors.New("wire: malformed frame")
	ErrTruncated        = errors.New("wire: truncated frame")
	ErrMalformedCommand = errors.New("wire: malformed command")
	ErrUnknownCommand   = errors.New("wire: unknown command type")
	ErrMalformedPayload = errors.New("wire: malformed payload")
	ErrBadMagic         = errors.New("wire: bad magic")
	ErrCompressed       = errors.New("wire: batch body is compressed")
)

// Recoverable reports whether a ReadFrame error concerned one frame only, so that reading can go
// on with the next frame.
func Recoverable(err error) bool {
	return errors.Is(err, ErrMalformedCommand) || errors.Is(err, ErrUnknownCommand)
}

// Frame is one decoded frame.
type Frame struct {
	// Cmd is the decoded command. Never nil when ReadFrame returns no error; for a recoverable
	// error it holds what could be decoded (possibly without Type).
	Cmd *pulsarpb.BaseCommand
	// Payload is everything after the command: for SEND the entry bytes, for MESSAGE the optional
	// broker entry metadata prefix and the entry bytes. nil for simple commands. The caller owns it.
	Payload []byte
	// WireSize is the number of bytes the frame took on the wire (4 + totalSize).
	WireSize int
}

// Type is the frame's command type (0 if unknown).
func (f Frame) Type() pulsarpb.BaseCommand_Type { return f.Cmd.GetType() }

// baseFields maps a sub-command's message descriptor to its BaseCommand field. Each sub-command's
// field number equals its BaseCommand_Type value, which is what Command and CommandBody rely on.
var (
	baseDesc   = (&pulsarpb.BaseCommand{}).ProtoReflect().Descriptor()
	baseFields = func() map[protoreflect.FullName]protoreflect.FieldDescriptor {
		m := make(map[protoreflect.FullName]protoreflect.FieldDescriptor)
		fields := baseDesc.Fields()
		for i := 0; i < fields.Len(); i++ {
			fd := fields.Get(i)
			if fd.Kind() == protoreflect.MessageKind {
				m[fd.Message().FullName()] = fd
			}
		}
		return m
	}()
)

// Command wraps a sub-command (*pulsarpb.CommandSend, *pulsarpb.CommandPing, ...) in a BaseCommand
// with the matching type. It panics if body is not a sub-command type: that is a programming error.
func Command(body proto.Message) *pulsarpb.BaseCommand {
	// Fast paths for the hot commands avoid reflection.
	switch b := body.(type) {
	case *pulsarpb.CommandSend:
		return &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEND.Enum(), Send: b}
	case *pulsarpb.CommandSendReceipt:
		return &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEND_RECEIPT.Enum(), SendReceipt: b}
	case *pulsarpb.CommandMessage:
		return &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_MESSAGE.Enum(), Message: b}
	case *pulsarpb.CommandAck:
		return &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_ACK.Enum(), Ack: b}
	case *pulsarpb.CommandFlow:
		return &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_FLOW.Enum(), Flow: b}
	case *pulsarpb.CommandPing:
		return &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PING.Enum(), Ping: b}
	case *pulsarpb.CommandPong:
		return &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PONG.Enum(), Pong: b}
	}
	fd, ok := baseFields[body.ProtoReflect().Descriptor().FullName()]
	if !ok {
		panic(fmt.Sprintf("wire.Command: %T is not a BaseCommand sub-command", body))
	}
	cmd := &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_Type(fd.Number()).Enum()}
	cmd.ProtoReflect().Set(fd, protoreflect.ValueOfMessage(body.ProtoReflect()))
	return cmd
}

// CommandBody returns the sub-command that cmd's type names, or an error wrapping
// ErrUnknownCommand (type not known to this build) or ErrMalformedCommand (sub-command missing).
func CommandBody(cmd *pulsarpb.BaseCommand) (proto.Message, error) {
	if cmd == nil || cmd.Type == nil {
		return nil, fmt.Errorf("%w: no type", ErrMalformedCommand)
	}
	t := cmd.GetType()
	if _, known := pulsarpb.BaseCommand_Type_name[int32(t)]; !known {
		return nil, fmt.Errorf("%w: %d", ErrUnknownCommand, int32(t))
	}
	fd := baseDesc.Fields().ByNumber(protoreflect.FieldNumber(t))
	if fd == nil {
		return nil, fmt.Errorf("%w: %s has no body field", ErrUnknownCommand, t)
	}
	m := cmd.ProtoReflect()
	if !m.Has(fd) {
		return nil, fmt.Errorf("%w: %s without its body", ErrMalformedCommand, t)
	}
	return m.Get(fd).Message().Interface(), nil
}

var marshalOpts = proto.MarshalOptions{}

// AppendFrame appends a frame carrying cmd and, when payload parts are given, the concatenation of
// those parts as its payload (for MESSAGE: an optional broker entry metadata prefix, then the entry
// bytes). It fails if the command lacks a required field.
func AppendFrame(dst []byte, cmd *pulsarpb.BaseCommand, payload ...[]byte) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0)
	var err error
	dst, err = marshalOpts.MarshalAppend(dst, cmd)
	if err != nil {
		return dst[:start], fmt.Errorf("wire: encode %s: %w", cmd.GetType(), err)
	}
	cmdSize := len(dst) - start - 8
	for _, p := range payload {
		dst = append(dst, p...)
	}
	total := len(dst) - start - 4
	if uint64(total) > math.MaxUint32 {
		return dst[:start], fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, total)
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(total))
	binary.BigEndian.PutUint32(dst[start+4:], uint32(cmdSize))
	return dst, nil
}

// AppendFrameHeader appends the head of a payload frame (sizes and command) whose payload of
// payloadSize bytes the caller writes separately, e.g. a stored entry sent with writev without
// copying. AppendFrameHeader(dst, cmd, len(p)) followed by p equals AppendFrame(dst, cmd, p).
func AppendFrameHeader(dst []byte, cmd *pulsarpb.BaseCommand, payloadSize int) ([]byte, error) {
	start := len(dst)
	dst, err := AppendFrame(dst, cmd)
	if err != nil {
		return dst, err
	}
	total := uint64(len(dst)-start-4) + uint64(payloadSize)
	if payloadSize < 0 || total > math.MaxUint32 {
		return dst[:start], fmt.Errorf("%w: payload of %d bytes", ErrFrameTooLarge, payloadSize)
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(total))
	return dst, nil
}

// EncodeFrame is AppendFrame into a new slice.
func EncodeFrame(cmd *pulsarpb.BaseCommand, payload ...[]byte) ([]byte, error) {
	n := 8 + marshalOpts.Size(cmd)
	for _, p := range payload {
		n += len(p)
	}
	return AppendFrame(make([]byte, 0, n), cmd, payload...)
}

// DecodeFrame decodes exactly one frame from b (which must hold the whole frame and nothing
// else). The payload aliases b. Errors are those of Reader.ReadFrame.
func DecodeFrame(b []byte, maxFrameSize int) (Frame, error) {
	if len(b) < 4 {
		return Frame{}, fmt.Errorf("%w: %d bytes", ErrTruncated, len(b))
	}
	total := binary.BigEndian.Uint32(b)
	if int64(total) > int64(maxFrameSize) {
		return Frame{}, fmt.Errorf("%w: %d > %d", ErrFrameTooLarge, total, maxFrameSize)
	}
	if int64(len(b)-4) < int64(total) {
		return Frame{}, fmt.Errorf("%w: have %d of %d bytes", ErrTruncated, len(b)-4, total)
	}
	if int64(len(b)-4) > int64(total) {
		return Frame{}, fmt.Errorf("%w: %d trailing bytes", ErrMalformedFrame, int64(len(b)-4)-int64(total))
	}
	return decodeBody(b[4:])
}

// decodeBody decodes [u32 cmdSize][cmd][payload]; the payload aliases body.
func decodeBody(body []byte) (Frame, error) {
	f := Frame{WireSize: 4 + len(body)}
	if len(body) < 4 {
		return f, fmt.Errorf("%w: totalSize %d too small", ErrMalformedFrame, len(body))
	}
	cmdSize := binary.BigEndian.Uint32(body)
	if cmdSize == 0 || int64(cmdSize) > int64(len(body)-4) {
		return f, fmt.Errorf("%w: commandSize %d with totalSize %d", ErrMalformedFrame, cmdSize, len(body))
	}
	cmdBytes := body[4 : 4+cmdSize]
	if rest := body[4+cmdSize:]; len(rest) > 0 {
		f.Payload = rest
	}
	cmd, err := decodeCommand(cmdBytes)
	f.Cmd = cmd
	return f, err
}

var unmarshalPartial = proto.UnmarshalOptions{AllowPartial: true}

// decodeCommand decodes and checks one BaseCommand: type known, body present, required fields set.
func decodeCommand(b []byte) (*pulsarpb.BaseCommand, error) {
	return decodeCommandInto(b, nil)
}

// decodeCommandInto is decodeCommand decoding a plain SEND into send (nil: a new one).
func decodeCommandInto(b []byte, send *sendCommand) (*pulsarpb.BaseCommand, error) {
	if cmd, ok := decodeSendFastInto(b, send); ok {
		return cmd, nil
	}
	if cmd, ok := decodeMessageFast(b); ok {
		return cmd, nil
	}
	cmd := &pulsarpb.BaseCommand{}
	if err := unmarshalPartial.Unmarshal(b, cmd); err != nil {
		return cmd, fmt.Errorf("%w: %v", ErrMalformedCommand, err)
	}
	if cmd.Type == nil {
		// proto2 closed enum: a type number this build does not know lands in unknown fields.
		if t, ok := unknownType(cmd.ProtoReflect().GetUnknown()); ok {
			return cmd, fmt.Errorf("%w: %d", ErrUnknownCommand, t)
		}
		return cmd, fmt.Errorf("%w: no type", ErrMalformedCommand)
	}
	if _, err := CommandBody(cmd); err != nil {
		return cmd, err
	}
	if err := proto.CheckInitialized(cmd); err != nil {
		return cmd, fmt.Errorf("%w: %s: %v", ErrMalformedCommand, cmd.GetType(), err)
	}
	return cmd, nil
}

// unknownType finds BaseCommand's type (a varint) among unknown-field bytes.
func unknownType(raw []byte) (uint64, bool) {
	for len(raw) > 0 {
		tag, n := binary.Uvarint(raw)
		if n <= 0 {
			return 0, false
		}
		raw = raw[n:]
		num, wt := tag>>3, tag&7
		switch wt {
		case 0:
			v, n := binary.Uvarint(raw)
			if n <= 0 {
				return 0, false
			}
			if num == uint64(BaseCommandField.Type) {
				return v, true
			}
			raw = raw[n:]
		case 1:
			if len(raw) < 8 {
				return 0, false
			}
			raw = raw[8:]
		case 2:
			l, n := binary.Uvarint(raw)
			if n <= 0 || l > uint64(len(raw)-n) {
				return 0, false
			}
			raw = raw[n+int(l):]
		case 5:
			if len(raw) < 4 {
				return 0, false
			}
			raw = raw[4:]
		default:
			return 0, false
		}
	}
	return 0, false
}
