// Package rawclient speaks Pulsar's binary protocol frame by frame, for tests that must send what
// no real client sends: lying sizes, garbage, commands out of order. It builds frames itself
// (`[totalSize u32][cmdSize u32][BaseCommand]`, plus `[magic u16][crc32c u32][metadataSize u32]
// [MessageMetadata][payload]` for SEND) from the generated protobuf types of internal/wire/pulsarpb,
// so a frame can be as wrong as a test wants; it decodes the broker's answers with its own bounded
// reader.
package rawclient

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/internal/wire"
	"github.com/meridian-mq/meridian/internal/wire/pulsarpb"
)

// MaxReadFrame bounds a frame this client accepts from the broker (the broker's own bound is its
// max message size plus padding, 5 MiB + 10 KiB by default).
const MaxReadFrame = 64 << 20

// magicCRC32C starts a SEND payload that carries a checksum.
const magicCRC32C = 0x0e01

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Cmd wraps a sub-command (*pulsarpb.CommandSend, ...) in a BaseCommand with the matching type.
func Cmd(body proto.Message) *pulsarpb.BaseCommand { return wire.Command(body) }

// Header is a frame's size prefix with any values, true or not.
func Header(totalSize, cmdSize uint32) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint32(b, totalSize)
	binary.BigEndian.PutUint32(b[4:], cmdSize)
	return b
}

// Frame is a simple command frame. A command that does not encode (a required field missing) is
// encoded partially: the broker must cope with that too.
func Frame(cmd *pulsarpb.BaseCommand) []byte {
	body, _ := proto.MarshalOptions{AllowPartial: true}.Marshal(cmd)
	return append(Header(uint32(4+len(body)), uint32(len(body))), body...)
}

// RawCommandFrame frames arbitrary bytes as the command (garbage protobuf, unknown fields).
func RawCommandFrame(body []byte) []byte {
	return append(Header(uint32(4+len(body)), uint32(len(body))), body...)
}

// Entry is the SEND payload for md and payload with a correct CRC-32C.
func Entry(md *pulsarpb.MessageMetadata, payload []byte) []byte {
	mdb, _ := proto.MarshalOptions{AllowPartial: true}.Marshal(md)
	b := make([]byte, 10, 10+len(mdb)+len(payload))
	binary.BigEndian.PutUint16(b, magicCRC32C)
	binary.BigEndian.PutUint32(b[6:], uint32(len(mdb)))
	b = append(b, mdb...)
	b = append(b, payload...)
	binary.BigEndian.PutUint32(b[2:], crc32.Checksum(b[6:], castagnoli))
	return b
}

// SendFrame is a SEND (or any command with a payload) frame: cmd followed by entry as it is.
func SendFrame(cmd *pulsarpb.BaseCommand, entry []byte) []byte {
	body, _ := proto.MarshalOptions{AllowPartial: true}.Marshal(cmd)
	out := Header(uint32(4+len(body)+len(entry)), uint32(len(body)))
	out = append(out, body...)
	return append(out, entry...)
}

// Conn is one TCP connection to a broker's binary port. Not safe for concurrent use.
type Conn struct {
	nc net.Conn
	br *bufio.Reader
	// Timeout bounds each write and, unless a call says otherwise, each read.
	Timeout time.Duration
}

// Dial connects to addr (host:port).
func Dial(addr string, timeout time.Duration) (*Conn, error) {
	nc, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	return &Conn{nc: nc, br: bufio.NewReaderSize(nc, 64<<10), Timeout: timeout}, nil
}

// Write writes b as it is.
func (c *Conn) Write(b []byte) error {
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.Timeout))
	_, err := c.nc.Write(b)
	return err
}

// Send writes cmd as a simple frame.
func (c *Conn) Send(cmd *pulsarpb.BaseCommand) error { return c.Write(Frame(cmd)) }

// Connect sends CONNECT and waits for CONNECTED.
func (c *Conn) Connect() (*pulsarpb.CommandConnected, error) {
	err := c.Send(Cmd(&pulsarpb.CommandConnect{
		ClientVersion:   proto.String("meridian-rawclient"),
		ProtocolVersion: proto.Int32(wire.ProtocolVersion),
	}))
	if err != nil {
		return nil, err
	}
	cmd, _, err := c.Await(pulsarpb.BaseCommand_CONNECTED, c.Timeout)
	if err != nil {
		return nil, err
	}
	return cmd.GetConnected(), nil
}

// ErrFrameTooLarge is returned for a frame from the broker over MaxReadFrame.
var ErrFrameTooLarge = errors.New("rawclient: frame from the broker over the limit")

// Read returns the next frame's command and payload (nil for simple commands) within timeout. It
// answers the broker's PINGs and returns them too.
func (c *Conn) Read(timeout time.Duration) (*pulsarpb.BaseCommand, []byte, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(timeout))
	var sizes [4]byte
	if _, err := io.ReadFull(c.br, sizes[:]); err != nil {
		return nil, nil, err
	}
	total := binary.BigEndian.Uint32(sizes[:])
	if total > MaxReadFrame || total < 4 {
		return nil, nil, fmt.Errorf("%w: totalSize %d", ErrFrameTooLarge, total)
	}
	buf := make([]byte, total)
	if _, err := io.ReadFull(c.br, buf); err != nil {
		return nil, nil, err
	}
	cmdSize := binary.BigEndian.Uint32(buf)
	if uint64(cmdSize)+4 > uint64(total) {
		return nil, nil, fmt.Errorf("rawclient: cmdSize %d over totalSize %d", cmdSize, total)
	}
	cmd := &pulsarpb.BaseCommand{}
	if err := (proto.UnmarshalOptions{AllowPartial: true, DiscardUnknown: true}).Unmarshal(buf[4:4+cmdSize], cmd); err != nil {
		return nil, nil, fmt.Errorf("rawclient: undecodable command from the broker: %w", err)
	}
	var payload []byte
	if rest := buf[4+cmdSize:]; len(rest) > 0 {
		payload = rest
	}
	if cmd.GetType() == pulsarpb.BaseCommand_PING {
		if err := c.Send(Cmd(&pulsarpb.CommandPong{})); err != nil {
			return nil, nil, err
		}
	}
	return cmd, payload, nil
}

// Await reads until a command of type want arrives (returning it), the connection fails, or
// timeout passes. Other commands are skipped.
func (c *Conn) Await(want pulsarpb.BaseCommand_Type, timeout time.Duration) (*pulsarpb.BaseCommand, []byte, error) {
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil, fmt.Errorf("rawclient: no %v within %v", want, timeout)
		}
		cmd, payload, err := c.Read(left)
		if err != nil {
			return nil, nil, fmt.Errorf("rawclient: waiting for %v: %w", want, err)
		}
		if cmd.GetType() == want {
			return cmd, payload, nil
		}
	}
}

// Drain reads and discards whatever the broker sends for d, or until the connection ends. It
// returns the frames read and whether the broker closed the connection (or it failed).
func (c *Conn) Drain(d time.Duration) (frames int, closed bool) {
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return frames, false
		}
		_, _, err := c.Read(left)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return frames, false
			}
			return frames, true
		}
		frames++
	}
}

// Close closes the connection with a FIN.
func (c *Conn) Close() error { return c.nc.Close() }

// Reset closes the connection with a RST (SO_LINGER 0).
func (c *Conn) Reset() error {
	if tc, ok := c.nc.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	return c.nc.Close()
}
