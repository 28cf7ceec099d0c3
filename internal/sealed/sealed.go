// Package sealed names the authenticated, sealed connections of endpoint
// (the mesh's authentication, then an HMAC tag on every frame) for the
// software fabric's TCP link, without making them part of endpoint's API.
// endpoint sets Dial, Accept and FrameSize when it is initialised, so a
// package that imports endpoint finds them set.
package sealed

import (
	"net"
	"time"
)

// HeaderSize is the size of a sealed frame's header.
const HeaderSize = 12

// Magic is the first four bytes (big-endian) of every frame of the
// authentication and of the sealed frames after it: what a dialing end
// sends first.
const Magic uint32 = 0x4d584d53

// Conn is an authenticated connection whose frames are sealed. Reads and
// writes may run in two goroutines at once.
type Conn interface {
	// Seal appends payload to dst as the next sealed frame, for a caller
	// that writes the connection itself, in the order Seal made them.
	Seal(dst, payload []byte) ([]byte, error)
	// WriteFrame sends payload as one sealed frame.
	WriteFrame(payload []byte) error
	// Open checks the next frame received, read in full (FrameSize
	// bytes), and returns its payload.
	Open(frame []byte) ([]byte, error)
	// ReadFrame reads, checks and returns the next frame's payload, at
	// most limit bytes.
	ReadFrame(limit int) ([]byte, error)
	// Close closes the connection.
	Close() error
}

// Purpose names what a sealed connection is for. It enters the proofs of
// the handshake, so that a session authenticated for one purpose is refused
// by a listener of another, even under the same key.
type Purpose byte

// The purposes.
const (
	// FabricLink is the software fabric's TCP link between hosts.
	FabricLink Purpose = 'F'
	// ToolParameters is the exchange of the kit's tools (mlx5kit-perf,
	// mlx5kit-pingpong) before their queue pairs connect.
	ToolParameters Purpose = 'T'
)

var (
	// Dial authenticates conn as its dialing end with key for purpose, as
	// a mesh member does, within timeout (0: 10 seconds).
	Dial func(conn net.Conn, key []byte, purpose Purpose, timeout time.Duration) (Conn, error)
	// Accept authenticates conn as its accepting end with key for
	// purpose; a peer that does not prove the key for it learns nothing.
	Accept func(conn net.Conn, key []byte, purpose Purpose, timeout time.Duration) (Conn, error)
	// FrameSize returns the size of the whole frame whose header (the
	// first HeaderSize bytes) is h, refusing a payload over limit.
	FrameSize func(h []byte, limit int) (int, error)
)
