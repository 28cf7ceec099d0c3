package transport_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/ibpath"
	"github.com/mlx5kit/mlx5kit/internal/transport/newqp"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// widthCase is a configuration with one field wider than the verbs or PRM
// field it goes into: run creates (or modifies) with it, and the error must
// name the field, the value and the allowed range (want) and wrap the
// package's sentinel, all of which are ctx.ErrInvalidArgument.
type widthCase struct {
	name string
	run  func() error
	want string
}

func requireRefused(t *testing.T, c widthCase) {
	t.Helper()
	err := c.run()
	require.Error(t, err, c.name)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument, c.name)
	require.ErrorContains(t, err, c.want, c.name)
}

// Every configuration field is checked against the width of the field it
// goes into and refused at create, connect or modify, never masked: SL 16
// would otherwise become SL 0 and SL 200 SL 8, a 5-bit timer code 32 the
// code 0 (for the ACK timeout: infinite). The same holds for the RoCE SL
// (3 bits), the address handle attributes, the QP attributes, the CQ
// depth and ibpath's paths.
func TestConfigFieldWidths(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	pd, cq := e.PD[0], e.CQ(0, 64)
	srq := func() *transport.SharedReceiveQueue {
		s, err := transport.NewSharedReceiveQueue(pd, ctx.SRQConfig{Depth: 4})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	newRC := func(c rc.Config) func() error {
		return func() error {
			c.SendDepth = 4
			qp, err := rc.New(pd, cq, c)
			if err == nil {
				_ = qp.Close()
			}
			return err
		}
	}
	newDCI := func(c dc.DCIConfig) func() error {
		return func() error {
			c.SendDepth = 4
			d, err := dc.NewDCI(pd, cq, c)
			if err == nil {
				_ = d.Close()
			}
			return err
		}
	}
	newDCT := func(c dc.DCTConfig) func() error {
		return func() error {
			c.SRQ = srq()
			d, err := dc.NewDCT(pd, cq, c)
			if err == nil {
				_ = d.Close()
			}
			return err
		}
	}
	newUD := func(c ud.Config) func() error {
		return func() error {
			c.SendDepth = 4
			qp, err := ud.New(pd, cq, c)
			if err == nil {
				_ = qp.Close()
			}
			return err
		}
	}
	newCQ := func(c ctx.CompletionQueueConfig) func() error {
		return func() error {
			q, err := e.Ctx[0].CreateCompletionQueue(c)
			if err == nil {
				_ = q.Close()
			}
			return err
		}
	}
	newAH := func(a ctx.AddressAttr) func() error {
		return func() error {
			a.DLID = 1
			ah, err := pd.CreateAddressHandle(a)
			if err == nil {
				_ = ah.Close()
			}
			return err
		}
	}
	// A QP in RESET: each modify must fail and leave it there.
	qp, err := pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: cq, Caps: ctx.QueuePairCaps{SendDepth: 4, MaxSendSGE: 1}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = qp.Close() })
	modify := func(a ctx.QPAttr) func() error {
		return func() error {
			a.State = ctx.QPStateInit
			err := qp.Modify(a)
			st, serr := qp.State()
			require.NoError(t, serr)
			require.Equal(t, ctx.QPStateReset, st, "a refused modify leaves the QP in RESET")
			return err
		}
	}
	path := func(mod func(*ibpath.Path)) func() error {
		return func() error {
			p := ibpath.Default()
			mod(&p)
			return p.Validate()
		}
	}

	for _, c := range []widthCase{
		// rc.Config.
		{"rc SL 16", newRC(rc.Config{SL: 16}), "SL 16 out of range 0..15"},
		{"rc SL 200", newRC(rc.Config{SL: 200}), "SL 200 out of range 0..15"},
		{"rc port 2", newRC(rc.Config{Port: 2}), "port 2 out of range 1..1"},
		{"rc min RNR timer 32", newRC(rc.Config{MinRNRTimer: 32}), "min RNR timer: 32 above 31"},
		{"rc timeout 32", newRC(rc.Config{Timeout: 32}), "timeout: 32 above 31"},
		{"rc retry count 8", newRC(rc.Config{RetryCount: 8}), "retry count: 8 above 7"},
		{"rc RNR retry 8", newRC(rc.Config{RNRRetry: 8}), "RNR retry: 8 above 7"},
		{"rc max rd atomic 17", newRC(rc.Config{MaxRdAtomic: 17}), "max RDMA reads/atomics: 17 above 16"},
		{"rc PSN 2^24", newRC(rc.Config{PSN: 1 << 24}), "PSN 0x1000000 wider than 24 bits"},
		// dc configs.
		{"DCI SL 16", newDCI(dc.DCIConfig{SL: 16}), "SL 16 out of range 0..15"},
		{"DCI port 9", newDCI(dc.DCIConfig{Port: 9}), "port 9 out of range 1..1"},
		{"DCI timeout 40", newDCI(dc.DCIConfig{Timeout: 40}), "timeout: 40 above 31"},
		{"DCI retry count 9", newDCI(dc.DCIConfig{RetryCount: 9}), "retry count: 9 above 7"},
		{"DCI RNR retry 8", newDCI(dc.DCIConfig{RNRRetry: 8}), "RNR retry: 8 above 7"},
		{"DCT min RNR timer 32", newDCT(dc.DCTConfig{MinRNRTimer: 32}), "min RNR timer: 32 above 31"},
		{"DCT port 2", newDCT(dc.DCTConfig{Port: 2}), "port 2 out of range 1..1"},
		// ud.Config.
		{"UD SL 16", newUD(ud.Config{SL: 16}), "SL 16 out of range 0..15"},
		{"UD SL 255", newUD(ud.Config{SL: 255}), "SL 255 out of range 0..15"},
		{"UD port 2", newUD(ud.Config{Port: 2}), "port 2 out of range 1..1"},
		{"UD PSN 2^24", newUD(ud.Config{PSN: 1 << 24}), "PSN 0x1000000 wider than 24 bits"},
		// transport's own checks.
		{"Knob 8 of 7", func() error { _, err := newqp.Knob(8, 7, 7); return err }, "8 above 7"},
		{"CheckFields", func() error {
			return newqp.CheckFields(newqp.Field{Name: "x", Value: 5, Min: 1, Max: 4})
		}, "x 5 out of range 1..4"},
		// ctx.CompletionQueueConfig.
		{"CQ depth 2^24", newCQ(ctx.CompletionQueueConfig{Depth: 1 << 24}), "CQ depth 16777216 out of range 1..16777215"},
		{"CQ depth 0", newCQ(ctx.CompletionQueueConfig{}), "CQ depth 0 out of range 1..16777215"},
		// ctx.AddressAttr (address handles).
		{"AH SL 16", newAH(ctx.AddressAttr{SL: 16}), "SL 16 out of range 0..15"},
		{"AH SL 200", newAH(ctx.AddressAttr{SL: 200}), "SL 200 out of range 0..15"},
		{"AH src path bits 128", newAH(ctx.AddressAttr{SrcPathBits: 128}), "SrcPathBits 128 out of range 0..127"},
		{"AH static rate 25", newAH(ctx.AddressAttr{StaticRate: 25}), "StaticRate 25 out of range 0..24"},
		{"AH flow label 2^20", newAH(ctx.AddressAttr{GlobalRoute: true, FlowLabel: 1 << 20}), "FlowLabel 1048576 out of range 0..1048575"},
		// ctx.QPAttr (modify).
		{"QP remote QPN 2^24", modify(ctx.QPAttr{RemoteQPN: 1 << 24}), "RemoteQPN 16777216 out of range 0..16777215"},
		{"QP RQ PSN 2^24", modify(ctx.QPAttr{RQPSN: 1 << 24}), "RQPSN 16777216 out of range"},
		{"QP SQ PSN 2^32-1", modify(ctx.QPAttr{SQPSN: 1<<32 - 1}), "SQPSN 4294967295 out of range 0..16777215"},
		{"QP min RNR timer 32", modify(ctx.QPAttr{MinRNRTimer: 32}), "MinRNRTimer 32 out of range 0..31"},
		{"QP timeout 32", modify(ctx.QPAttr{Timeout: 32}), "Timeout 32 out of range 0..31"},
		{"QP retry count 8", modify(ctx.QPAttr{RetryCount: 8}), "RetryCount 8 out of range 0..7"},
		{"QP RNR retry 8", modify(ctx.QPAttr{RNRRetry: 8}), "RNRRetry 8 out of range 0..7"},
		{"QP access", modify(ctx.QPAttr{Access: 1 << 8}), "access 0x100 has unknown bits"},
		{"QP path SL 16", modify(ctx.QPAttr{Path: ctx.AddressAttr{SL: 16}}), "Path.SL 16 out of range 0..15"},
		{"QP path flow label", modify(ctx.QPAttr{Path: ctx.AddressAttr{FlowLabel: 1<<32 - 1}}), "Path.FlowLabel 4294967295 out of range 0..1048575"},
		// ibpath.Path.
		{"path SL 16", path(func(p *ibpath.Path) { p.SL = 16 }), "SL 16 out of range (0..15)"},
		{"path source path bits", path(func(p *ibpath.Path) { p.SrcPathBits = 128 }), "source path bits 128 out of range (0..127)"},
		{"path rate", path(func(p *ibpath.Path) { p.StaticRate = 25 }), "rate 25 out of range (0..24)"},
		{"path flow label", path(func(p *ibpath.Path) { p.FlowLabel = 1 << 20 }), "flow label 1048576 out of range (0..1048575)"},
		{"path timeout", path(func(p *ibpath.Path) { p.Timeout = 32 }), "timeout 32 out of range (0..31)"},
		{"path RNR retry", path(func(p *ibpath.Path) { p.RNRRetry = 8 }), "RNR retry 8 out of range (0..7)"},
	} {
		requireRefused(t, c)
	}

	// The largest values of each field are accepted.
	for name, run := range map[string]func() error{
		"rc SL 15":       newRC(rc.Config{SL: 15, MinRNRTimer: 31, Timeout: 31, RetryCount: 7, RNRRetry: 7, MaxRdAtomic: 16}),
		"DCI SL 15":      newDCI(dc.DCIConfig{SL: 15}),
		"UD SL 15":       newUD(ud.Config{SL: 15}),
		"AH at the tops": newAH(ctx.AddressAttr{SL: 15, SrcPathBits: 127, StaticRate: 24, GlobalRoute: true, FlowLabel: 1<<20 - 1}),
		"path":           path(func(p *ibpath.Path) { p.SL, p.SrcPathBits, p.StaticRate, p.FlowLabel = 15, 127, 24, 1<<20-1 }),
	} {
		require.NoError(t, run(), name)
	}
}

// On an Ethernet (RoCE) port the SL is the 3-bit VLAN priority: 8 is
// refused where InfiniBand accepts up to 15.
func TestConfigRoCESL(t *testing.T) {
	e := transporttest.New(t, sim.Options{LinkLayer: ctx.LinkLayerEthernet})
	pd, cq := e.PD[0], e.CQ(0, 64)
	_, err := rc.New(pd, cq, rc.Config{SendDepth: 4, SL: 8})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.ErrorContains(t, err, "SL 8 out of range 0..7")
	_, err = dc.NewDCI(pd, cq, dc.DCIConfig{SendDepth: 4, SL: 15})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.ErrorContains(t, err, "SL 15 out of range 0..7")
	_, err = ud.New(pd, cq, ud.Config{SendDepth: 4, SL: 9})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	var pe *wqebuilder.PostError
	require.False(t, errors.As(err, &pe), "a configuration error, not a post error")
	q, err := rc.New(pd, cq, rc.Config{SendDepth: 4, SL: 7})
	require.NoError(t, err)
	require.NoError(t, q.Close())

	// ctx itself: address handles and the QP path.
	gids, err := e.Ctx[1].QueryGIDs(1)
	require.NoError(t, err)
	at := ctx.AddressAttr{GlobalRoute: true, DGID: gids[0].GID, HopLimit: 64}
	at.SL = 8
	_, err = pd.CreateAddressHandle(at)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.ErrorContains(t, err, "SL 8 out of range 0..7 on RoCE port 1")
	at.SL = 7
	ah, err := pd.CreateAddressHandle(at)
	require.NoError(t, err)
	require.NoError(t, ah.Close())
	raw, err := pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: cq, Caps: ctx.QueuePairCaps{SendDepth: 4, MaxSendSGE: 1}})
	require.NoError(t, err)
	defer raw.Close()
	require.NoError(t, raw.Modify(ctx.QPAttr{State: ctx.QPStateInit, Access: ctx.AccessRemoteWrite}))
	at.SL = 12
	err = raw.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: 5, PathMTU: ctx.MTU1024, Path: at})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.ErrorContains(t, err, "Path.SL 12 out of range 0..7")
	st, err := raw.State()
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateInit, st)
}
