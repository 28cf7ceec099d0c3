package endpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/stretchr/testify/require"
)

func sampleRC() Endpoint {
	return Endpoint{
		Transport: TransportRC,
		QPN:       0x00abcdef,
		LID:       0x1234,
		GID:       ctx.GID{0xfe, 0x80, 15: 0x01},
		GIDIndex:  3,
		PSN:       0x00123456,
		MTU:       ctx.MTU4096,
		Regions: []RemoteRegion{
			{Address: 0x7f0000001000, Length: 4096, RemoteKey: 0xdeadbeef, Access: ctx.AccessRemoteRead | ctx.AccessRemoteWrite},
		},
	}
}

func sampleUD() Endpoint {
	return Endpoint{Transport: TransportUD, QPN: 1, GID: ctx.GID{10: 0xff, 11: 0xff, 12: 10, 15: 7}, PSN: 0, MTU: ctx.MTU2048, QKey: 0x11111111}
}

func sampleDC() Endpoint {
	e := Endpoint{Transport: TransportDC, QPN: 0x77, LID: 9, PSN: ctx.MaxPSN, MTU: ctx.MTU256,
		DCTNumber: maxQPN, DCAccessKey: 0x0123456789abcdef}
	for i := range MaxRegions {
		e.Regions = append(e.Regions, RemoteRegion{Address: uint64(i) << 32, Length: uint64(i + 1), RemoteKey: uint32(i), Access: AccessKnown})
	}
	return e
}

// TestGoldenEncoding checks the layout byte for byte against a frame
// written out by hand from the documented format.
func TestGoldenEncoding(t *testing.T) {
	want := "" +
		"4d584550" + "0001" + "0048" + // magic, version, body length 48+24
		"01" + "05" + "03" + "01" + // RC, MTU 4096, GID index 3, 1 region
		"1234" + "0000" + // LID, reserved
		"00abcdef" + "00123456" + // QPN, PSN
		"00000000" + "00000000" + "0000000000000000" + // qkey, DCT, DC key
		"fe800000000000000000000000000001" + // GID
		"00007f0000001000" + "0000000000001000" + "deadbeef" + "00000006"
	b, err := sampleRC().MarshalBinary()
	require.NoError(t, err)
	require.Equal(t, want, hex.EncodeToString(b))
	require.Len(t, b, sampleRC().encodedSize())
}

func TestRoundTrip(t *testing.T) {
	for _, e := range []Endpoint{sampleRC(), sampleUD(), sampleDC(), {Transport: TransportRC, MTU: ctx.MTU1024}} {
		t.Run(e.Transport.String(), func(t *testing.T) {
			b, err := e.MarshalBinary()
			require.NoError(t, err)
			var got Endpoint
			require.NoError(t, got.UnmarshalBinary(b))
			require.Equal(t, e, got)
			require.True(t, e.Equal(got))

			// Canonical: the decoded value encodes to the same bytes.
			again, err := got.MarshalBinary()
			require.NoError(t, err)
			require.Equal(t, b, again)

			// AppendBinary appends after what is there.
			prefix := []byte("xy")
			out, err := e.AppendBinary(prefix)
			require.NoError(t, err)
			require.Equal(t, append([]byte("xy"), b...), out)

			// The stream form reads the same value and stops at its end.
			var buf bytes.Buffer
			require.NoError(t, writeEndpoint(&buf, e))
			buf.WriteString("next")
			got2, err := readEndpoint(&buf)
			require.NoError(t, err)
			require.Equal(t, e, got2)
			require.Equal(t, "next", buf.String())
		})
	}
}

func TestMaxEncodedSize(t *testing.T) {
	b, err := sampleDC().MarshalBinary()
	require.NoError(t, err)
	require.Len(t, b, maxEncodedSize)
	require.Equal(t, 8+48+64*24, maxEncodedSize)
}

// mutate returns a valid encoding of e changed by f.
func mutate(t *testing.T, e Endpoint, f func(b []byte) []byte) []byte {
	t.Helper()
	b, err := e.MarshalBinary()
	require.NoError(t, err)
	return f(b)
}

func TestUnmarshalErrors(t *testing.T) {
	be := binary.BigEndian
	rc, dc := sampleRC(), sampleDC()
	region0 := offRegions
	cases := []struct {
		name  string
		data  []byte
		err   error
		field string
	}{
		{"empty", nil, errTruncated, "header"},
		{"short header", []byte{0x4d, 0x58, 0x45}, errTruncated, "header"},
		{"bad magic", mutate(t, rc, func(b []byte) []byte { b[0] = 'X'; return b }), errBadMagic, "magic"},
		{"version 0", mutate(t, rc, func(b []byte) []byte { be.PutUint16(b[4:], 0); return b }), errVersion, "version"},
		{"version 2", mutate(t, rc, func(b []byte) []byte { be.PutUint16(b[4:], 2); return b }), errVersion, "version"},
		{"length below fixed body", mutate(t, rc, func(b []byte) []byte { be.PutUint16(b[6:], 47); return b }), errLength, "length"},
		{"length not a region multiple", mutate(t, rc, func(b []byte) []byte { be.PutUint16(b[6:], 48+23); return b }), errLength, "length"},
		{"length beyond max", mutate(t, rc, func(b []byte) []byte { be.PutUint16(b[6:], 0xffff); return b }), errLength, "length"},
		{"length disagrees with count", mutate(t, rc, func(b []byte) []byte { b[offRegionCount] = 0; return b }), errLength, "length"},
		{"truncated body", mutate(t, rc, func(b []byte) []byte { return b[:len(b)-1] }), errTruncated, "body"},
		{"header only", mutate(t, rc, func(b []byte) []byte { return b[:headerSize] }), errTruncated, "body"},
		{"trailing byte", mutate(t, rc, func(b []byte) []byte { return append(b, 0) }), errTrailingBytes, "length"},
		{"trailing endpoint", mutate(t, rc, func(b []byte) []byte { return append(b, b...) }), errTrailingBytes, "length"},
		{"transport 0", mutate(t, rc, func(b []byte) []byte { b[offTransport] = 0; return b }), errUnknownTransport, "transport"},
		{"transport 4", mutate(t, rc, func(b []byte) []byte { b[offTransport] = 4; return b }), errUnknownTransport, "transport"},
		{"mtu 0", mutate(t, rc, func(b []byte) []byte { b[offMTU] = 0; return b }), errRange, "mtu"},
		{"mtu 6", mutate(t, rc, func(b []byte) []byte { b[offMTU] = 6; return b }), errRange, "mtu"},
		{"qpn over 24 bits", mutate(t, rc, func(b []byte) []byte { be.PutUint32(b[offQPN:], 1<<24); return b }), errRange, "qpn"},
		{"psn over 24 bits", mutate(t, rc, func(b []byte) []byte { be.PutUint32(b[offPSN:], 0xffffffff); return b }), errRange, "psn"},
		{"dct over 24 bits", mutate(t, dc, func(b []byte) []byte { be.PutUint32(b[offDCTNumber:], 1<<24); return b }), errRange, "dct number"},
		{"reserved", mutate(t, rc, func(b []byte) []byte { b[offReserved+1] = 1; return b }), errReserved, "reserved"},
		{"qkey on RC", mutate(t, rc, func(b []byte) []byte { be.PutUint32(b[offQKey:], 1); return b }), errNotApplicable, "qkey"},
		{"qkey on DC", mutate(t, dc, func(b []byte) []byte { be.PutUint32(b[offQKey:], 1); return b }), errNotApplicable, "qkey"},
		{"dct on RC", mutate(t, rc, func(b []byte) []byte { be.PutUint32(b[offDCTNumber:], 1); return b }), errNotApplicable, "dct number"},
		{"dc key on UD", mutate(t, sampleUD(), func(b []byte) []byte { b[offDCAccessKey+7] = 1; return b }), errNotApplicable, "dc access key"},
		{"too many regions", func() []byte {
			b := mutate(t, dc, func(b []byte) []byte { b[offRegionCount] = MaxRegions + 1; return b })
			return b
		}(), ErrTooManyRegions, "region count"},
		{"region wraps", mutate(t, rc, func(b []byte) []byte {
			be.PutUint64(b[region0:], math.MaxUint64-10)
			be.PutUint64(b[region0+8:], 11)
			return b
		}), errRegionOverflow, "region 0"},
		{"unknown access bit", mutate(t, rc, func(b []byte) []byte { be.PutUint32(b[region0+20:], 1<<4); return b }), errAccess, "region 0 access"},
		{"high access bit", mutate(t, rc, func(b []byte) []byte { be.PutUint32(b[region0+20:], 1<<31); return b }), errAccess, "region 0 access"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := sampleUD()
			got := before
			err := got.UnmarshalBinary(c.data)
			require.Error(t, err)
			require.ErrorIs(t, err, c.err)
			require.ErrorIs(t, err, ErrMalformed)
			require.NotErrorIs(t, err, ctx.ErrInvalidArgument)
			var de *Error
			require.ErrorAs(t, err, &de)
			require.Equal(t, c.field, de.Field)
			require.Equal(t, "unmarshal", de.Op)
			require.True(t, strings.HasPrefix(err.Error(), "endpoint: unmarshal: "+c.field), err.Error())
			require.Equal(t, before, got, "a failed decode must leave the receiver unchanged")

			// The stream reader rejects it as well (EOF before any byte is
			// io.EOF); trailing bytes are the next frame to a stream.
			_, rerr := readEndpoint(bytes.NewReader(c.data))
			switch {
			case len(c.data) == 0:
				require.ErrorIs(t, rerr, io.EOF)
			case c.err == errTrailingBytes:
				require.NoError(t, rerr)
			default:
				require.ErrorIs(t, rerr, c.err)
			}
		})
	}
}

func TestErrorOffsetPointsAtField(t *testing.T) {
	b := mutate(t, sampleRC(), func(b []byte) []byte { binary.BigEndian.PutUint32(b[offPSN:], 1<<24); return b })
	var e Endpoint
	err := e.UnmarshalBinary(b)
	var de *Error
	require.ErrorAs(t, err, &de)
	require.Equal(t, 20, de.Offset)
	require.Equal(t, "endpoint: unmarshal: psn at byte 20: value out of range: 0x1000000 exceeds 24 bits", err.Error())
}

func TestValidateAndMarshalErrors(t *testing.T) {
	cases := []struct {
		name string
		edit func(e *Endpoint)
		err  error
	}{
		{"zero value", func(e *Endpoint) { *e = Endpoint{} }, errUnknownTransport},
		{"mtu", func(e *Endpoint) { e.MTU = 9 }, errRange},
		{"qpn", func(e *Endpoint) { e.QPN = maxQPN + 1 }, errRange},
		{"psn", func(e *Endpoint) { e.PSN = ctx.MaxPSN + 1 }, errRange},
		{"qkey on RC", func(e *Endpoint) { e.QKey = 5 }, errNotApplicable},
		{"dc key on RC", func(e *Endpoint) { e.DCAccessKey = 5 }, errNotApplicable},
		{"regions", func(e *Endpoint) { e.Regions = make([]RemoteRegion, MaxRegions+1) }, ErrTooManyRegions},
		{"overflow", func(e *Endpoint) { e.Regions[0] = RemoteRegion{Address: math.MaxUint64, Length: 1} }, errRegionOverflow},
		{"access", func(e *Endpoint) { e.Regions[0].Access = 1 << 7 }, errAccess},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := sampleRC()
			c.edit(&e)
			err := e.Validate()
			require.ErrorIs(t, err, c.err)
			require.ErrorIs(t, err, ctx.ErrInvalidArgument)
			require.NotErrorIs(t, err, ErrMalformed)
			b, merr := e.MarshalBinary()
			require.Nil(t, b)
			require.ErrorIs(t, merr, c.err)
			require.ErrorIs(t, merr, ctx.ErrInvalidArgument)
			prefix := []byte{1, 2}
			out, aerr := e.AppendBinary(prefix)
			require.ErrorIs(t, aerr, c.err)
			require.Equal(t, []byte{1, 2}, out)
			require.Error(t, writeEndpoint(io.Discard, e))
		})
	}
	// Boundaries that are valid.
	e := sampleRC()
	e.QPN, e.PSN = maxQPN, ctx.MaxPSN
	e.Regions = []RemoteRegion{{Address: math.MaxUint64, Length: 0}, {Address: 1, Length: math.MaxUint64 - 1}}
	require.NoError(t, e.Validate())
}

func TestReadTruncatedStream(t *testing.T) {
	b, err := sampleRC().MarshalBinary()
	require.NoError(t, err)
	for _, n := range []int{1, headerSize - 1, headerSize, len(b) - 1} {
		_, err := readEndpoint(bytes.NewReader(b[:n]))
		require.ErrorIs(t, err, errTruncated, "cut at %d", n)
		require.ErrorIs(t, err, io.ErrUnexpectedEOF, "cut at %d", n)
		require.ErrorIs(t, err, ErrMalformed, "cut at %d", n)
	}
	// A hostile length is rejected from the header alone: the reader
	// consumes the 8 header bytes and nothing more.
	h := mutate(t, sampleRC(), func(b []byte) []byte { binary.BigEndian.PutUint16(b[6:], 0xfff8); return b })
	r := bytes.NewReader(h)
	_, err = readEndpoint(r)
	require.ErrorIs(t, err, errLength)
	require.Equal(t, len(h)-headerSize, r.Len())
}

func TestReadPassesReaderErrors(t *testing.T) {
	boom := errors.New("boom")
	_, err := readEndpoint(io.MultiReader(bytes.NewReader([]byte{0x4d}), errReader{boom}))
	require.ErrorIs(t, err, boom)
	require.NotErrorIs(t, err, ErrMalformed)
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

func BenchmarkAppendBinary(b *testing.B) {
	e := sampleRC()
	buf := make([]byte, 0, maxEncodedSize)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = e.AppendBinary(buf[:0]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUnmarshalBinary(b *testing.B) {
	data, err := sampleRC().MarshalBinary()
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		var e Endpoint
		if err := e.UnmarshalBinary(data); err != nil {
			b.Fatal(err)
		}
	}
}
