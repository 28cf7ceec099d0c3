package endpoint

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/mlx5kit/mlx5kit/internal/sealed"
)

// A sealed connection carries the frames of a long-lived link (the
// software fabric's TCP link between hosts) after the authentication a
// mesh runs: the same hello, challenge and proof, under a purpose of its
// own (sealed.Purpose: the fabric's link, the tools' exchange) so that a
// proof made for a mesh, an exchange or another purpose is worthless here.
// Every frame after the proofs carries an HMAC tag under the session's
// sealing key over its direction, its number in the stream and its bytes:
// a frame altered, spliced from another session, replayed or reordered is
// refused.
const meshLink byte = 7

// maxSealedFrame is the largest payload ReadFrame accepts.
const maxSealedFrame = 64 << 20

// sealedConn is an authenticated connection whose frames are sealed (see
// dialSealed). Reads and writes may run in two goroutines at once.
type sealedConn struct {
	s        *session
	out, in  byte // directions of the frames sent and received
	writeMu  sync.Mutex
	sent     uint64
	received uint64
}

// dialSealed authenticates conn as its dialing end with sec, as a mesh
// member does (see Security): the listener proves that it holds the key
// first, then this end. It sends nothing but the proofs until both are
// made. A listener that does not prove the key (it holds another) makes
// the error match ErrAuth; one that refuses the hello (another protocol
// version) makes it match ErrRejected. The handshake is bounded by timeout (0: 10 seconds); conn's
// deadline is cleared on success; after an error conn is closed.
func dialSealed(conn net.Conn, sec Security, purpose sealed.Purpose, timeout time.Duration) (*sealedConn, error) {
	if err := sealedCheck(conn, sec); err != nil {
		_ = conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(handshakeTimeout(timeout)))
	s, err := dialAuth(conn, sec, byte(purpose), 0, 0)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("endpoint: link to %v: authenticate: %w", conn.RemoteAddr(), err)
	}
	_ = conn.SetDeadline(time.Time{})
	return &sealedConn{s: s, out: toListener, in: toDialer}, nil
}

// acceptSealed authenticates conn as its accepting end with sec. A peer
// that does not prove that it holds the key learns nothing: it gets the
// generic refusal, conn is closed, and the error matches ErrAuth. The
// handshake is bounded by timeout (0: 10 seconds); conn's deadline is
// cleared on success.
func acceptSealed(conn net.Conn, sec Security, purpose sealed.Purpose, timeout time.Duration) (*sealedConn, error) {
	if err := sealedCheck(conn, sec); err != nil {
		_ = conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(handshakeTimeout(timeout)))
	s, err := acceptAuth(conn, sec, byte(purpose))
	if err != nil {
		refuse(conn)
		return nil, fmt.Errorf("endpoint: link from %v: authenticate: %w", conn.RemoteAddr(), err)
	}
	if s.rank != 0 || s.peers != 0 {
		refuse(conn)
		return nil, fmt.Errorf("endpoint: link from %v: the peer claims rank %d of %d, a link claims none: %w", conn.RemoteAddr(), s.rank, s.peers, ErrAuth)
	}
	_ = conn.SetDeadline(time.Time{})
	return &sealedConn{s: s, out: toDialer, in: toListener}, nil
}

func handshakeTimeout(d time.Duration) time.Duration {
	if d <= 0 {
		return defaultHelloTimeout
	}
	return d
}

// sealedCheck refuses a Security that cannot be used, and a keyless one on
// a connection that leaves the host.
func sealedCheck(conn net.Conn, sec Security) error {
	if err := sec.check(); err != nil {
		return fmt.Errorf("endpoint: link with %v: %w", conn.RemoteAddr(), err)
	}
	if !sec.keyed() && !confined(conn) {
		return fmt.Errorf("endpoint: link with %v: no key, and the connection leaves this host (set a key): %w", conn.RemoteAddr(), ErrKeyRequired)
	}
	return nil
}

// tag returns the tag of the frame numbered seq in direction dir.
func (c *sealedConn) tag(dir byte, seq uint64, header, body []byte) []byte {
	h := hmac.New(sha256.New, c.s.sealKey[:])
	var b [9]byte
	b[0] = dir
	binary.BigEndian.PutUint64(b[1:], seq)
	h.Write(b[:])
	h.Write(header)
	h.Write(body)
	return h.Sum(nil)
}

// sealedOverhead is what sealing adds to a payload: the frame's header
// (sealedHeaderSize bytes) and its tag.
const (
	sealedHeaderSize = meshHeaderSize
	sealedOverhead   = meshHeaderSize + macSize
)

// Seal appends payload to dst as the next sealed frame, for a caller that
// writes the connection itself: the frames must reach the connection in
// the order Seal made them, and not mixed with WriteFrame's.
func (c *sealedConn) Seal(dst, payload []byte) ([]byte, error) {
	if len(payload) > maxSealedFrame {
		return dst, fmt.Errorf("endpoint: sealed frame of %d bytes, at most %d: %w", len(payload), maxSealedFrame, errLength)
	}
	start := len(dst)
	dst = binary.BigEndian.AppendUint32(dst, meshMagic)
	dst = binary.BigEndian.AppendUint16(dst, meshVersion)
	dst = append(dst, meshLink, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(payload)+macSize))
	dst = append(dst, payload...)
	dst = append(dst, c.tag(c.out, c.sent, dst[start:start+meshHeaderSize], payload)...)
	c.sent++
	return dst, nil
}

// WriteFrame sends payload as one sealed frame (at most maxSealedFrame
// bytes). Frames written by several goroutines do not interleave.
func (c *sealedConn) WriteFrame(payload []byte) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	frame, err := c.Seal(make([]byte, 0, sealedOverhead+len(payload)), payload)
	if err != nil {
		return err
	}
	_, err = c.s.conn.Write(frame)
	return err
}

// sealedFrameSize returns the size of the whole frame (header, payload and tag)
// whose header is h, for a caller that reads the connection itself. A
// header that is not a sealed frame's, or announces a payload longer than
// limit (at most maxSealedFrame; a negative limit is 0), is refused
// (ErrMalformed).
func sealedFrameSize(h []byte, limit int) (int, error) {
	limit = max(min(limit, maxSealedFrame), 0)
	if len(h) < meshHeaderSize {
		return 0, malformed("sealed frame header", len(h), errTruncated, fmt.Sprintf("%d bytes, want %d", len(h), meshHeaderSize))
	}
	be := binary.BigEndian
	switch {
	case be.Uint32(h) != meshMagic:
		return 0, malformed("mesh magic", 0, errBadMagic, fmt.Sprintf("%#08x, want %#08x", be.Uint32(h), meshMagic))
	case be.Uint16(h[4:]) != meshVersion:
		return 0, malformed("mesh version", 4, errVersion, fmt.Sprintf("the peer speaks version %d, this package %d", be.Uint16(h[4:]), meshVersion))
	case h[6] != meshLink:
		return 0, malformed("mesh frame type", 6, errRange, fmt.Sprintf("%s where a link frame was expected", frameName(h[6])))
	case h[7] != 0:
		return 0, malformed("mesh reserved", 7, errReserved, fmt.Sprintf("%#x", h[7]))
	}
	n := be.Uint32(h[8:])
	if uint64(n) > uint64(limit+macSize) || n < macSize {
		return 0, malformed("mesh length", 8, errLength, fmt.Sprintf("link frame of %d bytes, at least %d and at most %d", n, macSize, limit+macSize))
	}
	return meshHeaderSize + int(n), nil
}

// Open checks the next frame received, read in full (sealedFrameSize bytes),
// and returns its payload (a part of frame). A frame whose tag does not
// match makes the error match ErrAuth.
func (c *sealedConn) Open(frame []byte) ([]byte, error) {
	if len(frame) < sealedOverhead {
		return nil, malformed("sealed frame", meshHeaderSize, errTruncated, fmt.Sprintf("%d bytes, header and tag alone are %d", len(frame), sealedOverhead))
	}
	body, tag := frame[meshHeaderSize:len(frame)-macSize], frame[len(frame)-macSize:]
	if !hmac.Equal(c.tag(c.in, c.received, frame[:meshHeaderSize], body), tag) {
		return nil, fmt.Errorf("endpoint: frame %d of the link: its tag does not match (altered, replayed or not from this session): %w", c.received, ErrAuth)
	}
	c.received++
	return body, nil
}

// ReadFrame reads the next frame, checks its tag and returns its payload
// (a new slice). A frame longer than limit (at most maxSealedFrame; a
// negative limit is 0) is refused before it is read; a frame whose tag does not match makes the
// error match ErrAuth. Only one goroutine may read at a time.
func (c *sealedConn) ReadFrame(limit int) ([]byte, error) {
	limit = max(min(limit, maxSealedFrame), 0)
	f, err := readFrame(c.s.conn, meshLink, limit+macSize, -1)
	if err != nil {
		return nil, err
	}
	return c.Open(append(f.header[:], f.payload...))
}

// Close closes the connection.
func (c *sealedConn) Close() error { return c.s.conn.Close() }

// The sealed header is the mesh frame's header.
var _ [sealed.HeaderSize - sealedHeaderSize]struct{}
var _ [sealedHeaderSize - sealed.HeaderSize]struct{}

// The sealed magic is the mesh's.
var _ [sealed.Magic - meshMagic]struct{}
var _ [meshMagic - sealed.Magic]struct{}

func init() {
	sealed.Dial = func(conn net.Conn, key []byte, purpose sealed.Purpose, timeout time.Duration) (sealed.Conn, error) {
		c, err := dialSealed(conn, Security{Key: key}, purpose, timeout)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	sealed.Accept = func(conn net.Conn, key []byte, purpose sealed.Purpose, timeout time.Duration) (sealed.Conn, error) {
		c, err := acceptSealed(conn, Security{Key: key}, purpose, timeout)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	sealed.FrameSize = sealedFrameSize
}
