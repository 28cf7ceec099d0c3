package endpoint

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/sealed"
)

// pair is what sealedPair returns: both ends and their errors, and the
// dialing end's connection.
type pair struct {
	d, a               *sealedConn
	dialErr, acceptErr error
	raw                net.Conn
}

// sealedPair authenticates the two ends of a loopback TCP connection with
// the keys given, for the fabric's link, and returns both results.
func sealedPair(t *testing.T, dialKey, acceptKey []byte) pair {
	t.Helper()
	return sealedPairFor(t, dialKey, acceptKey, sealed.FabricLink, sealed.FabricLink)
}

// sealedPairFor is sealedPair with each end's purpose.
func sealedPairFor(t *testing.T, dialKey, acceptKey []byte, dialFor, acceptFor sealed.Purpose) pair {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	type res struct {
		c   *sealedConn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		conn, err := l.Accept()
		if err != nil {
			ch <- res{nil, err}
			return
		}
		c, err := acceptSealed(conn, Security{Key: acceptKey}, acceptFor, 5*time.Second)
		ch <- res{c, err}
	}()
	raw, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = raw.Close() })
	d, dialErr := dialSealed(raw, Security{Key: dialKey}, dialFor, 5*time.Second)
	r := <-ch
	if r.c != nil {
		t.Cleanup(func() { _ = r.c.Close() })
	}
	return pair{d: d, a: r.c, dialErr: dialErr, acceptErr: r.err, raw: raw}
}

func TestSealedConnFramesBothWays(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	p := sealedPair(t, key, key)
	d, a := p.d, p.a
	require.NoError(t, p.dialErr)
	require.NoError(t, p.acceptErr)
	go func() {
		_ = d.WriteFrame([]byte("one"))
		_ = d.WriteFrame(bytes.Repeat([]byte{7}, 100000))
	}()
	b, err := a.ReadFrame(1 << 20)
	require.NoError(t, err)
	require.Equal(t, []byte("one"), b)
	b, err = a.ReadFrame(1 << 20)
	require.NoError(t, err)
	require.Equal(t, bytes.Repeat([]byte{7}, 100000), b)
	go func() { _ = a.WriteFrame([]byte("back")) }()
	b, err = d.ReadFrame(16)
	require.NoError(t, err)
	require.Equal(t, []byte("back"), b)

	// A frame over the reader's limit is refused before it is read.
	go func() { _ = d.WriteFrame(make([]byte, 100)) }()
	_, err = a.ReadFrame(50)
	require.ErrorIs(t, err, ErrMalformed)

	// A negative limit refuses every payload, as 0 does.
	p = sealedPair(t, key, key)
	require.NoError(t, p.dialErr)
	require.NoError(t, p.acceptErr)
	go func() { _ = p.d.WriteFrame(make([]byte, 100)) }()
	_, err = p.a.ReadFrame(-macSize - 1)
	require.ErrorIs(t, err, ErrMalformed)
}

func TestSealedConnWrongKeyRefused(t *testing.T) {
	p := sealedPair(t, []byte("0123456789abcdef-wrong"), []byte("0123456789abcdef-right"))
	require.Nil(t, p.d)
	require.Nil(t, p.a)
	require.Error(t, p.dialErr)
	// The listener proves first: the dialer finds its proof wrong.
	require.ErrorIs(t, p.dialErr, ErrAuth)
	require.NotErrorIs(t, p.dialErr, ErrRejected)
	require.ErrorIs(t, p.acceptErr, ErrAuth)
	// The dialer hangs up on the wrong proof; the listener cannot tell
	// that from a dialer that gave up waiting, and says both, with the
	// time it took.
	require.Regexp(t, `the dialer hung up instead of proving that it holds the key, [0-9.]+[mµn]?s after this end began reading its hello \(it holds another key or none, or it gave up waiting for this end\)`, p.acceptErr.Error())

	// No key at all on a link is refused before anything is sent.
	p = sealedPair(t, nil, []byte("0123456789abcdef-right"))
	require.ErrorIs(t, p.dialErr, ErrKeyRequired)
}

func TestSealedConnReplayRefused(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	p := sealedPair(t, key, key)
	d, a, raw := p.d, p.a, p.raw
	require.NoError(t, p.dialErr)
	require.NoError(t, p.acceptErr)
	// Capture the bytes of one sealed frame by writing it through a
	// recording connection, then send them twice.
	rec := &tapConn{Conn: raw}
	d.s.conn = rec
	require.NoError(t, d.WriteFrame([]byte("pay 1")))
	_, err := raw.Write(rec.buf.Bytes())
	require.NoError(t, err)
	b, err := a.ReadFrame(64)
	require.NoError(t, err)
	require.Equal(t, []byte("pay 1"), b)
	_, err = a.ReadFrame(64)
	require.ErrorIs(t, err, ErrAuth)
}

type tapConn struct {
	net.Conn
	buf bytes.Buffer
}

func (r *tapConn) Write(b []byte) (int, error) {
	r.buf.Write(b)
	return r.Conn.Write(b)
}

func TestSealedConnSealOpen(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	p := sealedPair(t, key, key)
	d, a := p.d, p.a
	require.NoError(t, p.dialErr)
	require.NoError(t, p.acceptErr)
	var stream []byte
	stream, err := d.Seal(stream, []byte("first"))
	require.NoError(t, err)
	stream, err = d.Seal(stream, []byte("second"))
	require.NoError(t, err)
	n, err := sealedFrameSize(stream[:sealedHeaderSize], 64)
	require.NoError(t, err)
	require.Equal(t, sealedOverhead+5, n)
	b, err := a.Open(stream[:n])
	require.NoError(t, err)
	require.Equal(t, []byte("first"), b)
	// Out of order: the second frame opened twice fails the second time.
	m, err := sealedFrameSize(stream[n:n+sealedHeaderSize], 64)
	require.NoError(t, err)
	b, err = a.Open(stream[n : n+m])
	require.NoError(t, err)
	require.Equal(t, []byte("second"), b)
	_, err = a.Open(stream[n : n+m])
	require.ErrorIs(t, err, ErrAuth)
	_, err = sealedFrameSize(stream[:sealedHeaderSize], 4)
	require.ErrorIs(t, err, ErrMalformed)
	// A negative limit is no limit's end: it refuses every payload.
	_, err = sealedFrameSize(stream[:sealedHeaderSize], -macSize-1)
	require.ErrorIs(t, err, ErrMalformed)
	_, err = sealedFrameSize([]byte("not a frame!"), 64)
	require.ErrorIs(t, err, ErrMalformed)
}

// A session for the tools' exchange is worthless at the fabric's link,
// and the reverse, under the same key: each purpose is in the proofs.
func TestSealedPurposesApart(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	for _, c := range [][2]sealed.Purpose{{sealed.ToolParameters, sealed.FabricLink}, {sealed.FabricLink, sealed.ToolParameters}} {
		p := sealedPairFor(t, key, key, c[0], c[1])
		require.ErrorIs(t, p.dialErr, ErrAuth, "dial %c, accept %c", c[0], c[1])
		require.ErrorIs(t, p.acceptErr, ErrAuth, "dial %c, accept %c", c[0], c[1])
		require.Nil(t, p.d)
		require.Nil(t, p.a)
	}
	p := sealedPairFor(t, key, key, sealed.ToolParameters, sealed.ToolParameters)
	require.NoError(t, p.dialErr)
	require.NoError(t, p.acceptErr)
}
