package transport

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
)

func TestParseGRH(t *testing.T) {
	// IPv6 form: version 6, traffic class 0xa5, flow label 0xbcdef, hop
	// limit 9, SGID 1..16, DGID 101..116.
	b := make([]byte, 40)
	b[0], b[1], b[2], b[3] = 0x6a, 0x5b, 0xcd, 0xef
	b[7] = 9
	for i := range 16 {
		b[8+i], b[24+i] = byte(1+i), byte(101+i)
	}
	g, err := ParseGRH(b)
	require.NoError(t, err)
	require.False(t, g.IPv4)
	require.Equal(t, uint8(0xa5), g.TrafficClass)
	require.Equal(t, uint32(0xbcdef), g.FlowLabel)
	require.Equal(t, uint8(9), g.HopLimit)
	require.Equal(t, ctx.GID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, g.SGID)
	require.Equal(t, byte(116), g.DGID[15])

	// IPv4 form in bytes 20..40: 192.0.2.1 → 198.51.100.7, TOS 0x10, TTL
	// 33; the header checksum computed by hand (RFC 1071 example style).
	ip := []byte{0x45, 0x10, 0x00, 0x54, 0x00, 0x00, 0x40, 0x00, 33, 17, 0, 0,
		192, 0, 2, 1, 198, 51, 100, 7}
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(ip[i])<<8 | uint32(ip[i+1])
	}
	sum = sum&0xffff + sum>>16
	sum = sum&0xffff + sum>>16
	ip[10], ip[11] = byte(^sum>>8), byte(^sum)
	v4 := make([]byte, 40)
	copy(v4, b[:20]) // the undefined half looks like an IPv6 header
	copy(v4[20:], ip)
	g, err = ParseGRH(v4)
	require.NoError(t, err)
	require.True(t, g.IPv4)
	require.Equal(t, ctx.GID{10: 0xff, 11: 0xff, 12: 192, 13: 0, 14: 2, 15: 1}, g.SGID)
	require.Equal(t, ctx.GID{10: 0xff, 11: 0xff, 12: 198, 13: 51, 14: 100, 15: 7}, g.DGID)
	require.Equal(t, uint8(0x10), g.TrafficClass)
	require.Equal(t, uint8(33), g.HopLimit)
	require.Zero(t, g.FlowLabel)

	// A wrong checksum: not an IPv4 header, so the IPv6 reading stands.
	v4[30] ^= 1
	g, err = ParseGRH(v4)
	require.NoError(t, err)
	require.False(t, g.IPv4)
	// Neither form, or too short.
	_, err = ParseGRH(make([]byte, 40))
	require.ErrorIs(t, err, ErrBadGRH)
	_, err = ParseGRH(b[:39])
	require.ErrorIs(t, err, ErrBadGRH)
}

// TestParseGRHIPv4ZeroChecksum: a RoCE v2 IPv4 header behind undefined
// bytes that do not start with a 6 is the IPv4 form whatever its checksum
// field holds (zero here), as rdma-core's ibv_init_ah_from_wc reads it; only
// behind a leading 6 does the checksum decide.
func TestParseGRHIPv4ZeroChecksum(t *testing.T) {
	b := make([]byte, 40)
	ip := b[20:]
	ip[0], ip[1], ip[8], ip[9] = 0x45, 0x18, 64, 17
	copy(ip[12:16], []byte{10, 0, 0, 1})
	copy(ip[16:20], []byte{10, 0, 0, 2})
	g, err := ParseGRH(b)
	require.NoError(t, err)
	require.True(t, g.IPv4)
	require.True(t, g.RoCEv2)
	require.Equal(t, "::ffff:10.0.0.1", g.SGID.String())
	require.Equal(t, "::ffff:10.0.0.2", g.DGID.String())
	require.Equal(t, uint8(0x18), g.TrafficClass)
	require.Equal(t, uint8(64), g.HopLimit)

	// Behind a leading 6 the same header, checksum zero, is not believed:
	// the bytes are an IPv6 header.
	b[0] = 0x60
	g, err = ParseGRH(b)
	require.NoError(t, err)
	require.False(t, g.IPv4)

	// Version 4 is needed at byte 20 when byte 0 is not 6.
	b[0], ip[0] = 0, 0x55
	_, err = ParseGRH(b)
	require.ErrorIs(t, err, ErrBadGRH)
}

// TestParseGRHNextHeader: the IPv6 form is RoCE v2 with next header UDP, an
// InfiniBand or RoCE v1 GRH with 0x1b.
func TestParseGRHNextHeader(t *testing.T) {
	b := make([]byte, 40)
	b[0] = 0x60
	for next, v2 := range map[byte]bool{17: true, 0x1b: false} {
		b[6] = next
		g, err := ParseGRH(b)
		require.NoError(t, err)
		require.False(t, g.IPv4)
		require.Equal(t, v2, g.RoCEv2, "next header %#x", next)
	}
}
