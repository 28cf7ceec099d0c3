package endpoint

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// MaxPeers is the most peers one mesh connects. It bounds what a dialer may
// make the listener read: at most MaxPeers-1 encodings per connection.
const MaxPeers = 1024

// ErrRejected matches the error a dialer gets when the listening peer turns
// it away (wrong peer count, a rank already taken, a malformed hello) or
// gives up (a rank never joined). The error text carries the listener's
// reason.
var ErrRejected = errors.New("rejected by the mesh listener")

// ErrListenerUsed is returned by a second call of MeshListener.Exchange.
var ErrListenerUsed = errors.New("mesh listener already used")

// A mesh frame is a 12-byte header (magic "MXMS", version, type, a zero
// byte, payload length) and a payload:
//
//	hello  rank u32, peer count u32, then the dialer's endpoints for every
//	       other rank in rank order
//	table  the endpoints every other rank made for the receiver, in rank
//	       order
//	abort  the reason, text
const (
	meshMagic      uint32 = 0x4d584d53
	meshVersion    uint16 = 1
	meshHeaderSize        = 12
	meshHello      byte   = 1
	meshTable      byte   = 2
	meshAbort      byte   = 3
	maxAbortReason        = 512
	// abortTimeout bounds the write of an abort frame, which may happen
	// after the mesh's own deadline has passed.
	abortTimeout = time.Second
)

// Dial retry pacing while the listener comes up.
const (
	dialBackoffFirst = 10 * time.Millisecond
	dialBackoffMax   = 250 * time.Millisecond
)

func meshFrame(typ byte, payload []byte) []byte {
	b := make([]byte, 0, meshHeaderSize+len(payload))
	b = binary.BigEndian.AppendUint32(b, meshMagic)
	b = binary.BigEndian.AppendUint16(b, meshVersion)
	b = append(b, typ, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	return append(b, payload...)
}

// readMeshFrame reads one mesh frame whose payload may not exceed
// maxPayload (maxAbortReason for an abort).
func readMeshFrame(r io.Reader, maxPayload int) (byte, []byte, error) {
	var h [meshHeaderSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			return 0, nil, fmt.Errorf("%w: %w", malformed("mesh header", 0, ErrTruncated, "stream ended inside the header"), err)
		}
		return 0, nil, err
	}
	be := binary.BigEndian
	if m := be.Uint32(h[0:]); m != meshMagic {
		return 0, nil, malformed("mesh magic", 0, ErrBadMagic, fmt.Sprintf("%#08x, want %#08x", m, meshMagic))
	}
	if v := be.Uint16(h[4:]); v != meshVersion {
		return 0, nil, malformed("mesh version", 4, ErrVersion, fmt.Sprintf("%d, this package speaks %d", v, meshVersion))
	}
	typ := h[6]
	if typ < meshHello || typ > meshAbort {
		return 0, nil, malformed("mesh frame type", 6, ErrRange, fmt.Sprintf("%d is not hello, table or abort", typ))
	}
	if h[7] != 0 {
		return 0, nil, malformed("mesh reserved", 7, ErrReserved, fmt.Sprintf("%#x", h[7]))
	}
	limit := maxPayload
	if typ == meshAbort {
		limit = maxAbortReason
	}
	n := be.Uint32(h[8:])
	if uint64(n) > uint64(limit) {
		return 0, nil, malformed("mesh length", 8, ErrLength, fmt.Sprintf("payload of %d bytes, at most %d", n, limit))
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return 0, nil, fmt.Errorf("%w: %w", malformed("mesh payload", meshHeaderSize, ErrTruncated,
				fmt.Sprintf("stream ended inside a %d-byte payload", n)), io.ErrUnexpectedEOF)
		}
		return 0, nil, err
	}
	return typ, payload, nil
}

// decodeList decodes exactly count endpoints filling b.
func decodeList(b []byte, count int) ([]Endpoint, error) {
	list := make([]Endpoint, count)
	for i := range list {
		e, n, err := decode(b)
		if err != nil {
			return nil, fmt.Errorf("endpoint %d of %d: %w", i+1, count, err)
		}
		list[i], b = e, b[n:]
	}
	if len(b) != 0 {
		return nil, malformed("mesh payload", 0, ErrTrailingBytes, fmt.Sprintf("%d bytes after %d endpoints", len(b), count))
	}
	return list, nil
}

// maxListPayload is the largest payload carrying peers-1 endpoints and
// prefix bytes.
func maxListPayload(peers, prefix int) int { return prefix + (peers-1)*MaxEncodedSize }

// encodeOthers encodes local[j] for every j != skip, in rank order.
func encodeOthers(b []byte, local []Endpoint, skip int) ([]byte, error) {
	for j, e := range local {
		if j == skip {
			continue
		}
		var err error
		if b, err = e.AppendBinary(b); err != nil {
			return nil, fmt.Errorf("endpoint for rank %d: %w", j, err)
		}
	}
	return b, nil
}

func checkPeers(peers int) error {
	if peers < 1 || peers > MaxPeers {
		return fmt.Errorf("%d peers: %w (want 1..%d)", peers, ErrRange, MaxPeers)
	}
	return nil
}

// MeshListener is rank 0 of a mesh: it accepts the other ranks, collects the
// endpoints each made for every other, and hands each rank its column.
type MeshListener struct {
	listener net.Listener
	peers    int
	used     atomic.Bool
}

// ListenMesh listens on address (e.g. "127.0.0.1:0" or ":7471") for a mesh
// of peers ranks, itself rank 0.
func ListenMesh(ctx context.Context, address string, peers int) (*MeshListener, error) {
	if err := checkPeers(peers); err != nil {
		return nil, fmt.Errorf("endpoint: listen mesh: %w", err)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", address)
	if err != nil {
		return nil, fmt.Errorf("endpoint: listen mesh: %w", err)
	}
	return &MeshListener{listener: ln, peers: peers}, nil
}

// Addr returns the address the listener is bound to, to hand to dialers.
func (l *MeshListener) Addr() net.Addr { return l.listener.Addr() }

// Close stops listening. Exchange closes the listener itself when it
// returns; Close is for a listener whose Exchange never runs. A later
// Exchange fails at once.
func (l *MeshListener) Close() error {
	l.used.Store(true)
	return l.listener.Close()
}

// member is a rank that joined.
type member struct {
	conn    net.Conn
	watch   *watcher
	rank    int
	offered []Endpoint // offered[j]: this rank's endpoint for rank j (j != rank)
	err     error      // set when the connection was turned away
}

// abort sends the reason to a dialer (best effort, bounded by abortTimeout)
// and closes the connection.
func abort(conn net.Conn, reason string) {
	if len(reason) > maxAbortReason {
		reason = reason[:maxAbortReason]
	}
	_ = conn.SetDeadline(time.Now().Add(abortTimeout))
	_, _ = conn.Write(meshFrame(meshAbort, []byte(reason)))
	_ = conn.Close()
}

// Exchange runs rank 0 of the mesh. local[j] is the endpoint this peer made
// for rank j (local[0], its own, is returned unchanged and never sent). It
// waits for ranks 1..peers-1 to dial, then returns remote, where remote[j]
// is the endpoint rank j made for rank 0, and each dialer receives the same
// for itself.
//
// Connections that are not a valid hello for this mesh (garbage, another
// peer count, a rank already taken) are turned away and the wait goes on.
// The wait is bounded by ctx's deadline or DefaultTimeout; when it ends
// early every rank that joined is told why. Exchange closes the listener
// and every connection before it returns; a second call returns
// [ErrListenerUsed].
func (l *MeshListener) Exchange(ctx context.Context, local []Endpoint) ([]Endpoint, error) {
	op := fmt.Sprintf("endpoint: mesh listener on %v", l.listener.Addr())
	if l.used.Swap(true) {
		return nil, fmt.Errorf("%s: %w", op, ErrListenerUsed)
	}
	defer l.listener.Close()
	if len(local) != l.peers {
		return nil, fmt.Errorf("%s: %d local endpoints for %d peers: %w", op, len(local), l.peers, ErrInvalid)
	}
	for j := 1; j < len(local); j++ {
		if err := local[j].Validate(); err != nil {
			return nil, fmt.Errorf("%s: endpoint for rank %d: %w", op, j, err)
		}
	}
	if l.peers == 1 {
		return []Endpoint{local[0]}, nil
	}

	ctx, cancel := withDeadline(ctx)
	arrivals := make(chan *member)
	acceptFailed := make(chan error, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	stopClose := context.AfterFunc(ctx, func() { _ = l.listener.Close() })
	defer stopClose()

	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := l.listener.Accept()
			if err != nil {
				if ctx.Err() == nil {
					acceptFailed <- err
				}
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				m := l.greet(ctx, conn)
				select {
				case arrivals <- m:
				case <-ctx.Done():
					if m.err == nil {
						m.watch.stop()
						abort(conn, "the mesh is complete or has given up")
					}
				}
			}()
		}
	}()

	members := make([]*member, l.peers)
	joined := 0
	var lastRejected error
	for joined < l.peers-1 {
		select {
		case m := <-arrivals:
			if m.err != nil {
				lastRejected = m.err
				continue
			}
			if members[m.rank] != nil {
				m.watch.stop()
				abort(m.conn, fmt.Sprintf("rank %d has already joined", m.rank))
				lastRejected = fmt.Errorf("from %v: rank %d has already joined", m.conn.RemoteAddr(), m.rank)
				continue
			}
			members[m.rank] = m
			joined++
		case err := <-acceptFailed:
			for _, m := range members {
				if m != nil {
					m.watch.stop()
					abort(m.conn, "the mesh listener failed")
				}
			}
			return nil, fmt.Errorf("%s: accept: %w", op, err)
		case <-ctx.Done():
			var missing []int
			for r := 1; r < l.peers; r++ {
				if members[r] == nil {
					missing = append(missing, r)
				}
			}
			reason := fmt.Sprintf("%v waiting for ranks %v", ctx.Err(), missing)
			for _, m := range members {
				if m != nil {
					m.watch.stop()
					abort(m.conn, reason)
				}
			}
			err := fmt.Errorf("%s: %d of %d ranks joined: %w (missing ranks %v)", op, joined+1, l.peers, ctx.Err(), missing)
			if lastRejected != nil {
				err = fmt.Errorf("%w; last connection turned away: %w", err, lastRejected)
			}
			return nil, err
		}
	}
	stopClose()
	_ = l.listener.Close()

	// Every rank is in: send each its column.
	var failed []error
	for r := 1; r < l.peers; r++ {
		payload, err := encodeOthers(nil, column(local, members, r), r)
		if err == nil {
			_, err = members[r].conn.Write(meshFrame(meshTable, payload))
		}
		if err != nil {
			failed = append(failed, ioError(ctx, fmt.Sprintf("mesh listener: send table to rank %d", r), err))
		}
		members[r].watch.stop()
		_ = members[r].conn.Close()
	}
	if len(failed) > 0 {
		return nil, errors.Join(failed...)
	}
	return column(local, members, 0), nil
}

// column returns what every rank made for rank r: remote[j] is rank j's
// endpoint for r, remote[r] is the zero Endpoint unless r is 0 (then it is
// local[0]).
func column(local []Endpoint, members []*member, r int) []Endpoint {
	out := make([]Endpoint, len(local))
	for j := range out {
		switch {
		case j == r && r != 0:
		case j == 0:
			out[j] = local[r]
		default:
			out[j] = members[j].offered[r]
		}
	}
	return out
}

// greet reads and checks one dialer's hello. A bad hello is answered with an
// abort and the connection closed; the returned member then carries err.
func (l *MeshListener) greet(ctx context.Context, conn net.Conn) *member {
	reject := func(err error) *member {
		abort(conn, err.Error())
		return &member{err: fmt.Errorf("from %v: %w", conn.RemoteAddr(), err)}
	}
	w, err := watch(ctx, conn)
	if err != nil {
		_ = conn.Close()
		return &member{err: err}
	}
	typ, payload, err := readMeshFrame(conn, maxListPayload(l.peers, 8))
	if err != nil {
		w.stop()
		return reject(ioError(ctx, "read hello", err))
	}
	if typ != meshHello {
		w.stop()
		return reject(fmt.Errorf("frame type %d where a hello was expected: %w", typ, ErrMalformed))
	}
	if len(payload) < 8 {
		w.stop()
		return reject(malformed("hello", meshHeaderSize, ErrTruncated, fmt.Sprintf("%d bytes", len(payload))))
	}
	rank := binary.BigEndian.Uint32(payload[0:])
	peers := binary.BigEndian.Uint32(payload[4:])
	if peers != uint32(l.peers) {
		w.stop()
		return reject(malformed("peers", meshHeaderSize+4, ErrRange, fmt.Sprintf("peer count %d, the mesh has %d", peers, l.peers)))
	}
	if rank < 1 || rank >= peers {
		w.stop()
		return reject(malformed("rank", meshHeaderSize, ErrRange, fmt.Sprintf("rank %d, dialers are 1..%d", rank, peers-1)))
	}
	list, err := decodeList(payload[8:], l.peers-1)
	if err != nil {
		w.stop()
		return reject(fmt.Errorf("hello of rank %d: %w", rank, err))
	}
	offered := make([]Endpoint, l.peers)
	for j, k := 0, 0; j < l.peers; j++ {
		if j == int(rank) {
			continue
		}
		offered[j] = list[k]
		k++
	}
	return &member{conn: conn, watch: w, rank: int(rank), offered: offered}
}

// DialMesh joins a mesh as rank (1..len(local)-1) by dialing the listener
// (rank 0) at address, retrying with backoff while it is not yet up.
// local[j] is the endpoint this peer made for rank j (local[rank], its own,
// is returned unchanged and never sent). It returns remote, where remote[j]
// is the endpoint rank j made for this peer. Everything, retries included,
// is bounded by ctx's deadline or DefaultTimeout.
func DialMesh(ctx context.Context, address string, rank int, local []Endpoint) ([]Endpoint, error) {
	name := fmt.Sprintf("dial mesh %s as rank %d", address, rank)
	op := "endpoint: " + name
	peers := len(local)
	if err := checkPeers(peers); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if rank < 1 || rank >= peers {
		return nil, fmt.Errorf("%s: rank %d: %w (dialers are 1..%d)", op, rank, ErrRange, peers-1)
	}
	payload := binary.BigEndian.AppendUint32(nil, uint32(rank))
	payload = binary.BigEndian.AppendUint32(payload, uint32(peers))
	payload, err := encodeOthers(payload, local, rank)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	hello := meshFrame(meshHello, payload)

	ctx, cancel := withDeadline(ctx)
	defer cancel()
	conn, err := dialRetry(ctx, address)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	defer conn.Close()
	w, err := watch(ctx, conn)
	if err != nil {
		return nil, fmt.Errorf("%s: set deadline: %w", op, err)
	}
	defer w.stop()
	if _, err := conn.Write(hello); err != nil {
		return nil, ioError(ctx, name+": send hello", err)
	}
	typ, reply, err := readMeshFrame(conn, maxListPayload(peers, 0))
	if err != nil {
		return nil, ioError(ctx, name+": receive table", err)
	}
	switch typ {
	case meshAbort:
		return nil, fmt.Errorf("%s: %w: %q", op, ErrRejected, reply)
	case meshTable:
	default:
		return nil, fmt.Errorf("%s: frame type %d where a table was expected: %w", op, typ, ErrMalformed)
	}
	list, err := decodeList(reply, peers-1)
	if err != nil {
		return nil, fmt.Errorf("%s: table: %w", op, err)
	}
	remote := make([]Endpoint, peers)
	for j, k := 0, 0; j < peers; j++ {
		if j == rank {
			remote[j] = local[rank]
			continue
		}
		remote[j] = list[k]
		k++
	}
	return remote, nil
}

// dialRetry dials address until it answers or ctx ends, backing off from
// dialBackoffFirst to dialBackoffMax between attempts.
func dialRetry(ctx context.Context, address string) (net.Conn, error) {
	var d net.Dialer
	backoff := dialBackoffFirst
	for attempt := 1; ; attempt++ {
		conn, err := d.DialContext(ctx, "tcp", address)
		if err == nil {
			return conn, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("dial: %w after %d attempts: %w", ctx.Err(), attempt, err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("dial: %w after %d attempts: %w", ctx.Err(), attempt, err)
		case <-t.C:
		}
		backoff = min(2*backoff, dialBackoffMax)
	}
}

// Mesh connects len(local) peers in one process over TCP on address (e.g.
// "127.0.0.1:0"): rank 0 listens, the others dial. local[i][j] is the
// endpoint rank i made for rank j; the result remote[i][j] is the endpoint
// rank j made for rank i, that is local[j][i] after its trip over the
// wire (remote[i][i] is local[i][i], never sent). Every endpoint is checked
// before anything is sent, and the first rank to fail stops the others, so
// the error returned is that rank's. It is meant for tests and tools that
// run every rank in one process.
func Mesh(ctx context.Context, address string, local [][]Endpoint) ([][]Endpoint, error) {
	n := len(local)
	if err := checkPeers(n); err != nil {
		return nil, fmt.Errorf("endpoint: mesh: %w", err)
	}
	for i, row := range local {
		if len(row) != n {
			return nil, fmt.Errorf("endpoint: mesh: rank %d has %d endpoints for %d peers: %w", i, len(row), n, ErrInvalid)
		}
		for j, e := range row {
			if j == i {
				continue
			}
			if err := e.Validate(); err != nil {
				return nil, fmt.Errorf("endpoint: mesh: rank %d's endpoint for rank %d: %w", i, j, err)
			}
		}
	}
	l, err := ListenMesh(ctx, address, n)
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	remote := make([][]Endpoint, n)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if i == 0 {
				remote[i], err = l.Exchange(ctx, local[i])
			} else {
				remote[i], err = DialMesh(ctx, addr, i, local[i])
			}
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("endpoint: mesh: rank %d: %w", i, err)
					cancel()
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return remote, nil
}
