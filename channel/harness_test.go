package channel_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/sim"
)

// host is one device of a software fabric with a PD and one registered
// buffer.
type host struct {
	dev *ctx.Context
	pd  *ctx.ProtectionDomain
	buf *ctx.Buffer
	mr  *ctx.MemoryRegion
}

func (h *host) bytes() []byte { return h.mr.Bytes() }

func (h *host) sge(off, n int) []channel.SGE { return []channel.SGE{channel.Slice(h.mr, off, n)} }

func newFabric(t testing.TB, devices int) *sim.Fabric {
	f := sim.New(sim.Options{Mode: sim.Engine, Devices: devices, IdleSleep: 20 * time.Microsecond})
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func newHost(t testing.TB, f *sim.Fabric, i int, size int) *host {
	t.Helper()
	dev, err := f.Open(deviceName(i))
	require.NoError(t, err)
	t.Cleanup(func() { _ = dev.Close() })
	pd, err := dev.AllocProtectionDomain()
	require.NoError(t, err)
	buf, err := ctx.AllocBuffer(size, ctx.BufferOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = buf.Close() })
	mr, err := pd.RegisterBuffer(buf, ctx.AccessLocalWrite|ctx.AccessRemoteWrite|ctx.AccessRemoteRead|ctx.AccessRemoteAtomic)
	require.NoError(t, err)
	return &host{dev: dev, pd: pd, buf: buf, mr: mr}
}

func deviceName(i int) string {
	return "sim" + itoa(i)
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

// wire sends e through its binary encoding, as a peer would receive it.
func wire(t testing.TB, e endpoint.Endpoint) endpoint.Endpoint {
	b, err := e.MarshalBinary()
	require.NoError(t, err)
	var out endpoint.Endpoint
	require.NoError(t, out.UnmarshalBinary(b))
	return out
}

// pair builds and connects a Channel between two hosts, each sharing its
// buffer.
func pair(t testing.TB, a, b *host, opts channel.Options) (*channel.Channel, *channel.Channel) {
	t.Helper()
	pa, err := channel.New(a.pd, opts)
	require.NoError(t, err)
	pb, err := channel.New(b.pd, opts)
	require.NoError(t, err)
	require.NoError(t, pa.Share(a.mr))
	require.NoError(t, pb.Share(b.mr))
	ea, eb := wire(t, pa.Endpoint()), wire(t, pb.Endpoint())
	ca, err := pa.Handshake(eb)
	require.NoError(t, err)
	cb, err := pb.Handshake(ea)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ca.Close(); _ = cb.Close() })
	return ca, cb
}
