package endpoint

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/mlx5kit/mlx5kit/internal/linger"
	"github.com/mlx5kit/mlx5kit/internal/names"
	"github.com/mlx5kit/mlx5kit/internal/perftestwire"
)

// MinKeySize is the shortest pre-shared key accepted: 16 bytes. The key
// should be random (e.g. `head -c 32 /dev/urandom | base64`): a proof made
// with it is public, so a guessable key can be found offline.
const MinKeySize = 16

// Errors of the authenticated exchange and mesh.
var (
	// ErrKeyRequired: there is no key, and the connection or the listening
	// address is not confined to this host (or InsecureLoopback was not
	// asked for). Nothing was sent.
	ErrKeyRequired = errors.New("a pre-shared key is required")
	// ErrBadKey: the key is shorter than MinKeySize.
	ErrBadKey = errors.New("key too short")
	// ErrAuth: the peer did not prove that it holds the key (another key,
	// no key, a replayed or altered message), or claimed what it may not.
	ErrAuth = errors.New("peer not authenticated")
)

// Security says how the two ends of a connection prove to each other that
// they hold the same pre-shared key before either learns anything of the
// other's endpoints.
//
// With a Key, each end sends a fresh random nonce and answers the other's
// with HMAC-SHA256 over both nonces, its role and the ranks claimed; the
// proofs are compared in constant time, so a recorded, replayed or
// reflected proof fails. The frames that follow (endpoints, tables) carry
// an HMAC under a key derived from the same nonces, so a third party can
// neither alter nor splice them. The key authenticates; it does not hide
// the endpoints from someone who can read the network (use TLS for that,
// see MeshOptions.TLS).
//
// Without a Key the exchange is refused, unless InsecureLoopback is set:
// then it runs unauthenticated, and only over a connection whose two ends
// are loopback addresses (or an in-process pipe or a Unix socket). Every
// process of the host can then join, so it is for tests and single-host
// tools.
type Security struct {
	// Key is the pre-shared key, at least MinKeySize bytes, the same at
	// both ends.
	Key []byte
	// InsecureLoopback allows an exchange without a key on a connection
	// confined to this host. It is ignored when Key is set.
	InsecureLoopback bool
}

// check reports whether s can be used.
func (s Security) check() error {
	switch {
	case len(s.Key) >= MinKeySize:
		return nil
	case len(s.Key) > 0:
		return fmt.Errorf("key of %d bytes, at least %d: %w", len(s.Key), MinKeySize, ErrBadKey)
	case !s.InsecureLoopback:
		return fmt.Errorf("no key (set Security.Key to at least %d random bytes, or InsecureLoopback for a host-local exchange): %w",
			MinKeySize, ErrKeyRequired)
	}
	return nil
}

// keyed reports whether s authenticates (else it is InsecureLoopback).
func (s Security) keyed() bool { return len(s.Key) > 0 }

// Side says which end of a connection an exchange runs on: the two ends of
// one exchange must be on different sides. The side is part of what each
// end proves, so a proof cannot be sent back to its maker.
type Side uint8

const (
	// DialSide is the end that dialed the connection.
	DialSide Side = 1
	// AcceptSide is the end that accepted it.
	AcceptSide Side = 2
)

var sideNames = [...]string{DialSide: "dial side", AcceptSide: "accept side"}

// String returns "dial side", "accept side" or "Side(n)".
func (s Side) String() string { return names.Of(s, sideNames[:], "Side") }

// localAddr reports whether a is an address on this host only: a loopback
// IP, an in-process pipe or a Unix socket.
func localAddr(a net.Addr) bool {
	if a == nil {
		return false
	}
	switch a.Network() {
	case "pipe", "unix", "unixpacket":
		return true
	}
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.IsLoopback()
	}
	ap, err := netip.ParseAddrPort(a.String())
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

// confined reports whether both ends of conn are on this host.
func confined(conn net.Conn) bool { return localAddr(conn.LocalAddr()) && localAddr(conn.RemoteAddr()) }

// The authentication messages. Every one has a fixed size, so the reader
// refuses any other length before allocating.
const (
	nonceSize     = 32
	macSize       = sha256.Size
	helloSize     = nonceSize + 8 // nonce, rank u32, peers u32
	challengeSize = nonceSize + macSize
	proofSize     = macSize
)

// Purposes: what a proof is for, so that a proof made for one protocol is
// worthless in the other.
const (
	purposeMesh     byte = 'M'
	purposeExchange byte = 'X'
)

// Roles inside a proof.
const (
	roleListener byte = 'L'
	roleDialer   byte = 'D'
)

// Directions of a sealed frame.
const (
	toListener byte = '>'
	toDialer   byte = '<'
)

// session is one authenticated connection: the nonces and claims both ends
// proved, and the key that seals the frames after the proofs.
type session struct {
	conn        net.Conn
	key         []byte // nil without a key (InsecureLoopback)
	purpose     byte
	nonceDialer [nonceSize]byte
	nonceListen [nonceSize]byte
	rank, peers uint32
	sealKey     [macSize]byte
}

// transcript is what both proofs and the sealing key cover: the protocol,
// its version, the purpose, both nonces and the claims.
func (s *session) transcript(label string, role byte) []byte {
	b := make([]byte, 0, 64+2*nonceSize)
	b = append(b, "mlx5kit mesh "...)
	b = append(b, label...)
	b = binary.BigEndian.AppendUint16(b, meshVersion)
	b = append(b, s.purpose, role)
	b = append(b, s.nonceDialer[:]...)
	b = append(b, s.nonceListen[:]...)
	b = binary.BigEndian.AppendUint32(b, s.rank)
	return binary.BigEndian.AppendUint32(b, s.peers)
}

func (s *session) mac(data ...[]byte) []byte {
	h := hmac.New(sha256.New, s.key)
	for _, d := range data {
		h.Write(d)
	}
	return h.Sum(nil)
}

// proof is role's proof of holding the key.
func (s *session) proof(role byte) []byte { return s.mac(s.transcript("proof", role)) }

// deriveSealKey sets the key that seals the frames after the proofs.
func (s *session) deriveSealKey() { copy(s.sealKey[:], s.mac(s.transcript("seal", 0))) }

// seal returns the tag of a frame (its header and payload) sent towards
// dir.
func (s *session) seal(dir byte, frame []byte) []byte {
	h := hmac.New(sha256.New, s.sealKey[:])
	h.Write([]byte{dir})
	h.Write(frame)
	return h.Sum(nil)
}

// writeSealed sends a frame of type typ with payload, followed inside the
// payload by its tag.
func (s *session) writeSealed(dir, typ byte, payload []byte) error {
	frame := meshFrameSized(typ, payload, macSize)
	frame = append(frame, s.seal(dir, frame)...)
	_, err := s.conn.Write(frame)
	return err
}

// openSealed checks the tag of a frame received from dir and returns its
// payload without the tag.
func (s *session) openSealed(dir byte, header, payload []byte) ([]byte, error) {
	if len(payload) < macSize {
		return nil, malformed("sealed frame", meshHeaderSize, errTruncated, fmt.Sprintf("%d bytes, the tag alone is %d", len(payload), macSize))
	}
	body, tag := payload[:len(payload)-macSize], payload[len(payload)-macSize:]
	h := hmac.New(sha256.New, s.sealKey[:])
	h.Write([]byte{dir})
	h.Write(header)
	h.Write(body)
	if !hmac.Equal(h.Sum(nil), tag) {
		return nil, fmt.Errorf("a frame's tag does not match (altered, or not from this session): %w", ErrAuth)
	}
	return body, nil
}

// newNonce returns 32 bytes from the system's random source.
func newNonce() (n [nonceSize]byte) {
	_, _ = rand.Read(n[:]) // crypto/rand.Read never fails (it crashes the program instead)
	return n
}

// dialAuth runs the dialing end's half of the authentication on conn: it
// sends its nonce and claims, checks the listener's proof, and sends its
// own. Only then may it send its endpoints.
func dialAuth(conn net.Conn, sec Security, purpose byte, rank, peers uint32) (*session, error) {
	s := &session{conn: conn, key: sec.Key, purpose: purpose, nonceDialer: newNonce(), rank: rank, peers: peers}
	hello := make([]byte, 0, helloSize)
	hello = append(hello, s.nonceDialer[:]...)
	hello = binary.BigEndian.AppendUint32(hello, rank)
	hello = binary.BigEndian.AppendUint32(hello, peers)
	if _, err := conn.Write(meshFrame(meshHello, hello)); err != nil {
		return nil, fmt.Errorf("send hello: %w", err)
	}
	f, err := readFrame(conn, meshChallenge, challengeSize, 0)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
		return nil, fmt.Errorf("receive challenge: the listener closed the connection before its challenge (its process is gone or done, it is another kind of listener, or it closed this connection to make room for newer ones): %w", err)
	}
	if err != nil {
		return nil, fmt.Errorf("receive challenge: %w", err)
	}
	if f.typ == meshAbort {
		return nil, rejected(nil)
	}
	if len(f.payload) != challengeSize {
		return nil, malformed("challenge", meshHeaderSize, errLength, fmt.Sprintf("%d bytes, want %d", len(f.payload), challengeSize))
	}
	copy(s.nonceListen[:], f.payload)
	if s.nonceListen == s.nonceDialer {
		return nil, fmt.Errorf("the listener sent back this end's own nonce: %w", ErrAuth)
	}
	if !hmac.Equal(s.proof(roleListener), f.payload[nonceSize:]) {
		why := "the listener did not prove that it holds the key (another key, or none)"
		if !sec.keyed() {
			why = "the listener did not prove that it runs without a key as this end does (it may require one)"
		}
		return nil, fmt.Errorf("%s: %w", why, ErrAuth)
	}
	if _, err := conn.Write(meshFrame(meshProof, s.proof(roleDialer))); err != nil {
		return nil, fmt.Errorf("send proof: %w", err)
	}
	s.deriveSealKey()
	return s, nil
}

// acceptAuth runs the listening end's half on conn: it reads the dialer's
// nonce and claims, answers with its own nonce and proof, and checks the
// dialer's proof. The claims are checked by the caller, after this.
func acceptAuth(conn net.Conn, sec Security, purpose byte) (*session, error) {
	start := time.Now()
	s := &session{conn: conn, key: sec.Key, purpose: purpose, nonceListen: newNonce()}
	f, err := readFrame(conn, meshHello, helloSize, -1)
	if err != nil {
		return nil, fmt.Errorf("read hello: %w", err)
	}
	if len(f.payload) != helloSize {
		return nil, malformed("hello", meshHeaderSize, errLength, fmt.Sprintf("%d bytes, want %d", len(f.payload), helloSize))
	}
	copy(s.nonceDialer[:], f.payload)
	s.rank = binary.BigEndian.Uint32(f.payload[nonceSize:])
	s.peers = binary.BigEndian.Uint32(f.payload[nonceSize+4:])
	if s.nonceDialer == s.nonceListen {
		return nil, fmt.Errorf("the dialer sent this end's own nonce: %w", ErrAuth)
	}
	challenge := append(s.nonceListen[:], s.proof(roleListener)...)
	if _, err := conn.Write(meshFrame(meshChallenge, challenge)); err != nil {
		return nil, fmt.Errorf("send challenge: %w", err)
	}
	f, err = readFrame(conn, meshProof, proofSize, -1)
	if errors.Is(err, io.EOF) {
		// The dialer checks this end's proof first and hangs up when it is
		// wrong; it also hangs up when its own deadline passes first (this
		// end slow to answer: paused, or busy), which the time taken shows.
		return nil, fmt.Errorf("the dialer hung up instead of proving that it holds the key, %v after this end began reading its hello (it holds another key or none, or it gave up waiting for this end): %w: %w",
			time.Since(start).Round(time.Millisecond), ErrAuth, err)
	}
	if err != nil {
		return nil, fmt.Errorf("read proof: %w", err)
	}
	if len(f.payload) != proofSize || !hmac.Equal(s.proof(roleDialer), f.payload) {
		return nil, fmt.Errorf("the dialer did not prove that it holds the key: %w", ErrAuth)
	}
	s.deriveSealKey()
	return s, nil
}

// refuse sends the one failure every rejection gets, whatever its reason
// (an empty abort frame), and closes conn. It reveals nothing but the
// protocol version. Before closing it reads and drops, for a moment, what
// the peer had already sent, so that the close does not reset the
// connection and destroy the refusal before the peer reads it.
func refuse(conn net.Conn) {
	writeRefusal(conn)
	_ = linger.Close(conn, lingerTimeout, lingerBytes)
}

// How long and how much refuse drains.
const (
	lingerTimeout = 250 * time.Millisecond
	lingerBytes   = 64 << 10
)

// writeRefusal sends the generic refusal on conn (best effort, bounded by
// abortTimeout).
func writeRefusal(conn net.Conn) {
	_ = conn.SetDeadline(time.Now().Add(abortTimeout))
	_, _ = conn.Write(meshFrame(meshAbort, nil))
}

// rejected is the dialing end's error for an abort: reason is nil for the
// generic refusal.
func rejected(reason []byte) error {
	if len(reason) == 0 {
		return fmt.Errorf("%w (the listener says no more to an unauthenticated or refused peer: "+
			"another key, rank, peer count or protocol version, or a rank already taken; its own error says which)", ErrRejected)
	}
	return fmt.Errorf("%w: %q", ErrRejected, reason)
}

// frame is one frame read from a connection.
type frame struct {
	header  [meshHeaderSize]byte
	typ     byte
	payload []byte
}

// readFrame reads one frame of type want, whose payload may not exceed
// limit, or an abort, whose payload may not exceed abortLimit (a negative
// abortLimit refuses aborts: the listener never receives one). The
// header's length is checked against the limit of its type before any
// payload is allocated or read.
func readFrame(r io.Reader, want byte, limit, abortLimit int) (frame, error) {
	var f frame
	if _, err := io.ReadFull(r, f.header[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			return f, fmt.Errorf("%w: %w", malformed("mesh header", 0, errTruncated, "stream ended inside the header"), err)
		}
		return f, err
	}
	h := f.header[:]
	be := binary.BigEndian
	if m := be.Uint32(h[0:]); m != meshMagic {
		detail := fmt.Sprintf("%#08x, want %#08x", m, meshMagic)
		if m == encodingMagic {
			detail = "a bare endpoint: the peer speaks the unauthenticated exchange of version 1 of this package"
			return f, malformed("mesh magic", 0, errVersion, detail)
		}
		if v, ok := perftestwire.Version(h[:4]); ok {
			detail = fmt.Sprintf("%q: the peer speaks perftest's exchange (its first bytes are perftest's version string), not this package's", v)
		}
		return f, malformed("mesh magic", 0, errBadMagic, detail)
	}
	if v := be.Uint16(h[4:]); v != meshVersion {
		return f, malformed("mesh version", 4, errVersion, fmt.Sprintf("the peer speaks version %d, this package %d", v, meshVersion))
	}
	f.typ = h[6]
	if h[7] != 0 {
		return f, malformed("mesh reserved", 7, errReserved, fmt.Sprintf("%#x", h[7]))
	}
	switch {
	case f.typ == want:
	case f.typ == meshAbort && abortLimit >= 0:
		limit = abortLimit
	default:
		return f, malformed("mesh frame type", 6, errRange, fmt.Sprintf("%s where a %s was expected", frameName(f.typ), frameName(want)))
	}
	n := be.Uint32(h[8:])
	if uint64(n) > uint64(limit) {
		return f, malformed("mesh length", 8, errLength, fmt.Sprintf("%s of %d bytes, at most %d", frameName(f.typ), n, limit))
	}
	f.payload = make([]byte, n)
	if _, err := io.ReadFull(r, f.payload); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return f, fmt.Errorf("%w: %w", malformed("mesh payload", meshHeaderSize, errTruncated,
				fmt.Sprintf("stream ended inside a %d-byte payload", n)), io.ErrUnexpectedEOF)
		}
		return f, err
	}
	return f, nil
}

// frameName names a frame type.
func frameName(typ byte) string {
	switch typ {
	case meshHello:
		return "hello"
	case meshTable:
		return "table"
	case meshAbort:
		return "abort"
	case meshChallenge:
		return "challenge"
	case meshProof:
		return "proof"
	case meshOffer:
		return "offer"
	}
	return fmt.Sprintf("frame type %d", typ)
}
