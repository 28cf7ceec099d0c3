package transporttest

import (
	"fmt"
	"math/rand/v2"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// Buffer layout of the data tests (both sides): sources, destinations.
const (
	SrcOff = 0
	DstOff = 2 << 20
	gap    = 96 // between the pieces of a scatter/gather list
)

// Sizes are the payload sizes the data tests use, 0 bytes to 64 KiB.
var Sizes = []int{0, 1, 3, 12, 16, 17, 31, 32, 33, 48, 60, 64, 65, 100, 128, 255, 256, 300, 444, 512, 1000, 4095, 4096, 4097, 9000, 32768, 65536}

// Payload says how a WQE carries its bytes.
type Payload int

// Payload forms.
const (
	Inline Payload = iota // one inline segment
	SGE1                  // one data segment
	SGEN                  // up to 4 data segments
	Mixed                 // data segments, then inline data
)

// Payloads lists every form.
var Payloads = []Payload{Inline, SGE1, SGEN, Mixed}

func (p Payload) String() string { return [...]string{"inline", "sge1", "sgeN", "mixed"}[p] }

// Piece is one buffer of a scatter/gather list.
type Piece struct{ Off, N int }

// Gather writes data at side i in pieces (with gaps between them, from
// SrcOff) and returns them.
func (e *Env) Gather(i int, data []byte, sizes []int) []Piece {
	off, pos := SrcOff, 0
	var out []Piece
	for _, k := range sizes {
		copy(e.Mem(i, off, k), data[pos:pos+k])
		out = append(out, Piece{off, k})
		pos += k
		off += k + gap
	}
	return out
}

// AddPayload adds data (from side 0) to a send or write stage in form p
// within the limits lim, and returns the stage's FinishBlueFlame. ok is
// false when the queue cannot carry the payload that way.
func (e *Env) AddPayload(lim transport.Limits, s wqebuilder.DataStage, data []byte, p Payload, r *rand.Rand) (finish func() error, ok bool) {
	n := len(data)
	sges := func(sizes []int) wqebuilder.DataStage {
		for _, pc := range e.Gather(0, data, sizes) {
			s = s.SGE(e.Addr(0, pc.Off), uint32(pc.N), e.LKey(0))
		}
		return s
	}
	switch p {
	case Inline:
		if n > int(lim.MaxInline) {
			return nil, false
		}
		return s.Inline(data).FinishBlueFlame, true
	case SGE1:
		return sges([]int{n}).FinishBlueFlame, true
	case SGEN:
		return sges(Split(n, int(min(lim.MaxSendSGE, 4)), r)).FinishBlueFlame, true
	default:
		// Data segments and inline data share the payload segments of the
		// largest WQE: as many as MaxSendSGE data segments or MaxInline
		// bytes inline.
		room := max(int(lim.MaxSendSGE), prm.InlineDS(int(lim.MaxInline)))
		k := int(min(lim.MaxSendSGE-1, 2))
		tail := min(n/2, (room-k)*prm.SegmentSize-prm.InlineHeaderSize, int(lim.MaxInline))
		head := n - tail
		if tail <= 0 || head == 0 || k < 1 {
			return nil, false
		}
		s = sges(Split(head, k, r))
		return s.Inline(data[head:]).FinishBlueFlame, true
	}
}

// ScatterRecv posts, through begin, a receive of n bytes (plus skip bytes
// in front, the UD GRH space) at side i's destination area, split in up to
// maxSGE pieces, and returns the pieces.
func (e *Env) ScatterRecv(i int, begin func(uint64) transport.RecvStage, wrid uint64, skip, n, maxSGE int, r *rand.Rand) []Piece {
	e.T.Helper()
	s := begin(wrid)
	off := DstOff
	var out []Piece
	for k, size := range Split(n+skip, maxSGE, r) {
		e.Poison(i, off, size)
		s = s.SGE(e.Addr(i, off), uint32(size), e.LKey(i))
		if k == 0 && size == 0 {
			continue
		}
		out = append(out, Piece{off, size})
		off += size + 2*Guard
	}
	require.NoError(e.T, s.FinishDoorbell())
	return out
}

// ExpectPieces requires the pieces at side i to hold skip bytes (not
// checked) followed by data.
func (e *Env) ExpectPieces(i int, pieces []Piece, skip int, data []byte, what string) {
	e.T.Helper()
	pos := -skip
	for k, p := range pieces {
		lo := max(pos, 0)
		hi := pos + p.N
		if hi > 0 {
			// A piece that starts in the skipped bytes has them in front
			// of the data instead of the guard.
			e.expect(i, p.Off+(lo-pos), data[lo:hi], fmt.Sprintf("%s piece %d", what, k), lo == pos)
		}
		pos = hi
	}
}
