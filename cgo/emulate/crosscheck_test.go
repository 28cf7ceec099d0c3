//go:build cgo && linux

package emulate_test

import (
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/cgo/emulate"
	"github.com/mlx5kit/mlx5kit/cgo/emulate/internal/plainverbs"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// crossSide is the kit's end of a cross-check: a Context of the hardware
// provider on sim0 (rdma-core underneath, the emulated kernel below it)
// with a CQ and a registered buffer.
type crossSide struct {
	c   *ctx.Context
	pd  *ctx.ProtectionDomain
	cq  *ctx.CompletionQueue
	buf *ctx.Buffer
	mr  *ctx.MemoryRegion
	// maps is the count of UAR pages mapped before the Context opened.
	maps int
}

func openCrossSide(t *testing.T) *crossSide {
	s := &crossSide{maps: emulate.MappingCount()}
	var err error
	s.c, err = ctx.Open(ctx.Options{Provider: ctx.ProviderHardware, Device: "sim0"})
	require.NoError(t, err)
	s.pd, err = s.c.AllocProtectionDomain()
	require.NoError(t, err)
	s.cq, err = s.c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 64})
	require.NoError(t, err)
	s.buf, err = ctx.AllocBuffer(1<<16, ctx.BufferOptions{})
	require.NoError(t, err)
	s.mr, err = s.pd.RegisterBuffer(s.buf, ctx.AccessLocalWrite|ctx.AccessRemoteWrite|ctx.AccessRemoteRead)
	require.NoError(t, err)
	return s
}

// closeCrossSide closes the Context and waits until libibverbs closed the
// device, which it does once the queue memory the kit was handed is
// collected, so that no descriptor is left open.
func closeCrossSide(t *testing.T, s *crossSide) {
	maps := s.maps
	require.NoError(t, s.c.Close())
	require.NoError(t, s.buf.Close())
	*s = crossSide{}
	for deadline := time.Now().Add(10 * time.Second); emulate.MappingCount() != maps && time.Now().Before(deadline); {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	require.Equal(t, maps, emulate.MappingCount(), "the device was closed")
}

func (s *crossSide) addr(off int) uint64 { return uint64(s.mr.Addr()) + uint64(off) }

// pollC waits for one completion of the libibverbs side.
func pollC(t *testing.T, p interface {
	Poll() (plainverbs.Completion, bool, error)
}) plainverbs.Completion {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		c, ok, err := p.Poll()
		require.NoError(t, err)
		if ok {
			return c
		}
		time.Sleep(50 * time.Microsecond)
	}
	t.Fatal("no completion from ibv_poll_cq")
	return plainverbs.Completion{}
}

// pattern returns n bytes that differ for each seed.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i)*7 + seed
	}
	return b
}

// TestCrossCheckKitAndLibmlx5 connects a queue pair posted and polled by
// the kit (rc and ud over the cgo provider: wqebuilder, monocq) to a queue
// pair of plain libibverbs on another device (ibv_post_send,
// ibv_post_recv, ibv_poll_cq: libmlx5's own WQEs and CQE parsing), both
// on the emulated device, and sends SENDs with immediate both ways on RC
// and UD, checking the bytes, the opcodes, the byte counts, the
// immediates and the queue pair numbers each side's completions report.
// libmlx5's WQEs executed by the model and the model's CQEs parsed by
// libmlx5 check the model and the kit against rdma-core independently.
func TestCrossCheckKitAndLibmlx5(t *testing.T) {
	const n = 300
	t.Run("RC", func(t *testing.T) {
		k := openCrossSide(t)
		p, err := plainverbs.Open("sim1", plainverbs.RC, 1<<16)
		require.NoError(t, err)
		defer p.Close()
		poller, err := transport.NewPoller(k.cq)
		require.NoError(t, err)
		qp, err := rc.New(k.pd, k.cq, rc.Config{SendDepth: 16, RecvDepth: 16, MaxSendSGE: 1, MaxRecvSGE: 1, Port: 1})
		require.NoError(t, err)
		require.NoError(t, poller.Add(&qp.Queue))
		kitEnd := qp.Endpoint()
		require.NoError(t, p.ConnectRC(kitEnd.QPN, kitEnd.LID, kitEnd.GID, kitEnd.PSN))
		require.NoError(t, qp.Connect(endpoint.Endpoint{Transport: endpoint.TransportRC, QPN: p.QPN(), LID: p.LID(),
			GID: p.GID(), PSN: 0, MTU: ctx.MTU1024}))

		for round := range 3 {
			// libmlx5 → kit.
			want := pattern(n, byte(round))
			copy(p.Buf(), want)
			require.NoError(t, qp.PostRecv(uint64(100+round), k.addr(4096), n, k.mr.LKey()))
			require.NoError(t, p.PostSendImm(0, n, uint64(200+round), 0xabc0+uint32(round), 0, 0))
			sent := pollC(t, p)
			require.Equal(t, plainverbs.Completion{WRID: uint64(200 + round), Opcode: plainverbs.OpcodeSend, HasImm: true, QPN: p.QPN()},
				sent, "ibv_poll_cq: the send completion of the WQE libmlx5 wrote")
			var got []transport.Completion
			for deadline := time.Now().Add(10 * time.Second); len(got) == 0 && time.Now().Before(deadline); {
				poller.Poll(4, func(c *transport.Completion) { got = append(got, *c) })
			}
			require.Len(t, got, 1)
			require.NoError(t, got[0].Err())
			require.Equal(t, prm.CQERespSendImm, got[0].Opcode)
			require.Equal(t, uint64(100+round), got[0].WRID)
			require.Equal(t, uint32(n), got[0].ByteCount)
			require.Equal(t, 0xabc0+uint32(round), got[0].Immediate)
			require.Equal(t, qp.QPN(), got[0].QPN)
			require.Equal(t, want, k.buf.Bytes()[4096:4096+n], "the bytes libmlx5's WQE gathered")

			// kit → libmlx5.
			want = pattern(n, byte(0x80+round))
			copy(k.buf.Bytes(), want)
			require.NoError(t, p.PostRecv(8192, n, uint64(300+round)))
			s, err := qp.Post(uint64(400+round), wqebuilder.Signaled)
			require.NoError(t, err)
			require.NoError(t, s.SendImm(0xdef0+uint32(round)).SGE(k.addr(0), n, k.mr.LKey()).FinishBlueFlame())
			var sends []transport.Completion
			for deadline := time.Now().Add(10 * time.Second); len(sends) == 0 && time.Now().Before(deadline); {
				poller.Poll(4, func(c *transport.Completion) { sends = append(sends, *c) })
			}
			require.Len(t, sends, 1)
			require.NoError(t, sends[0].Err())
			require.Equal(t, prm.CQEReq, sends[0].Opcode)
			require.Equal(t, prm.OpSendImm, sends[0].SendOpcode)
			require.Equal(t, uint64(400+round), sends[0].WRID)
			recv := pollC(t, p)
			require.Equal(t, plainverbs.Completion{WRID: uint64(300 + round), Opcode: plainverbs.OpcodeRecv, ByteLen: n,
				Immediate: 0xdef0 + uint32(round), HasImm: true, QPN: p.QPN(), SourceQPN: qp.QPN()}, recv,
				"ibv_poll_cq: libmlx5 parsed the model's receive CQE")
			require.Equal(t, want, p.Buf()[8192:8192+n], "the bytes the kit's WQE gathered")
		}
		require.NoError(t, qp.Close())
		p.Close()
		closeCrossSide(t, k)
	})

	t.Run("UD", func(t *testing.T) {
		const qkey = 0x11111111
		k := openCrossSide(t)
		p, err := plainverbs.Open("sim1", plainverbs.UD, 1<<16)
		require.NoError(t, err)
		defer p.Close()
		poller, err := transport.NewPoller(k.cq)
		require.NoError(t, err)
		qp, err := ud.New(k.pd, k.cq, ud.Config{SendDepth: 16, RecvDepth: 16, QKey: qkey, Port: 1})
		require.NoError(t, err)
		require.NoError(t, poller.Add(&qp.Queue))
		kitEnd := qp.Endpoint()
		require.NoError(t, p.ReadyUD(qkey, kitEnd.LID, kitEnd.GID))
		remote, err := qp.NewRemote(endpoint.Endpoint{Transport: endpoint.TransportUD, QPN: p.QPN(), LID: p.LID(),
			GID: p.GID(), QKey: qkey, MTU: ctx.MTU1024})
		require.NoError(t, err)

		for round := range 3 {
			// libmlx5 → kit.
			want := pattern(n, byte(round))
			copy(p.Buf(), want)
			require.NoError(t, qp.PostRecv(uint64(100+round), k.addr(4096), ud.GRHSize+n, k.mr.LKey()))
			require.NoError(t, p.PostSendImm(0, n, uint64(200+round), 0x5150+uint32(round), kitEnd.QPN, qkey))
			sent := pollC(t, p)
			require.Equal(t, plainverbs.Completion{WRID: uint64(200 + round), Opcode: plainverbs.OpcodeSend, HasImm: true, QPN: p.QPN()}, sent)
			var got []transport.Completion
			for deadline := time.Now().Add(10 * time.Second); len(got) == 0 && time.Now().Before(deadline); {
				poller.Poll(4, func(c *transport.Completion) { got = append(got, *c) })
			}
			require.Len(t, got, 1)
			require.NoError(t, got[0].Err())
			require.Equal(t, prm.CQERespSendImm, got[0].Opcode)
			require.Equal(t, uint32(ud.GRHSize+n), got[0].ByteCount)
			require.Equal(t, 0x5150+uint32(round), got[0].Immediate)
			require.Equal(t, p.QPN(), got[0].SourceQPN, "the datagram names libmlx5's QP")
			require.Equal(t, want, k.buf.Bytes()[4096+ud.GRHSize:4096+ud.GRHSize+n])

			// kit → libmlx5.
			want = pattern(n, byte(0x40+round))
			copy(k.buf.Bytes(), want)
			require.NoError(t, p.PostRecv(8192, ud.GRHSize+n, uint64(300+round)))
			s, err := qp.Post(uint64(400+round), wqebuilder.Signaled, remote)
			require.NoError(t, err)
			require.NoError(t, s.SendImm(0x6160+uint32(round)).SGE(k.addr(0), n, k.mr.LKey()).FinishBlueFlame())
			var sends []transport.Completion
			for deadline := time.Now().Add(10 * time.Second); len(sends) == 0 && time.Now().Before(deadline); {
				poller.Poll(4, func(c *transport.Completion) { sends = append(sends, *c) })
			}
			require.Len(t, sends, 1)
			require.NoError(t, sends[0].Err())
			require.Equal(t, prm.CQEReq, sends[0].Opcode)
			recv := pollC(t, p)
			require.Equal(t, plainverbs.Completion{WRID: uint64(300 + round), Opcode: plainverbs.OpcodeRecv, ByteLen: ud.GRHSize + n,
				Immediate: 0x6160 + uint32(round), HasImm: true, QPN: p.QPN(), SourceQPN: qp.QPN()}, recv)
			require.True(t, bytes.Equal(want, p.Buf()[8192+ud.GRHSize:8192+ud.GRHSize+n]), "the bytes the kit's WQE gathered")
		}
		require.NoError(t, remote.Close())
		require.NoError(t, qp.Close())
		p.Close()
		closeCrossSide(t, k)
	})
}

// pollKit polls the kit's CQ until n completions arrived or ten seconds
// passed.
func pollKit(poller *transport.Poller, n int) []transport.Completion {
	var got []transport.Completion
	for deadline := time.Now().Add(10 * time.Second); len(got) < n && time.Now().Before(deadline); {
		poller.Poll(4, func(c *transport.Completion) { got = append(got, *c) })
	}
	return got
}

// TestCrossCheckDC is the cross-check on DC: a DCI of the kit (package
// dc: wqebuilder's DC segment, the address vector of the kit's address
// handle, polled with transport.Poller) sends SENDs with immediate to a
// DCT that libmlx5 created (mlx5dv_create_qp) and that receives through
// an SRQ posted with ibv_post_srq_recv and polled with ibv_poll_cq; and a
// DCI that libmlx5 created and posts with ibv_wr_send_imm and
// mlx5dv_wr_set_dc_addr through an address handle of ibv_create_ah sends
// to a DCT of the kit on a kit SRQ. The bytes, opcodes, byte counts,
// immediates, DCT numbers and source QPNs are checked on both sides.
func TestCrossCheckDC(t *testing.T) {
	const (
		n       = 300
		cKey    = 0xc0ffee11
		kitKey  = 0x5eed0dc7
		dstOff  = 8192
		kitRecv = 4096
	)
	k := openCrossSide(t)
	p, err := plainverbs.OpenDC("sim1", 1<<16, cKey)
	require.NoError(t, err)
	defer p.Close()
	require.NotZero(t, p.DCTNumber(), "libmlx5 learnt the DCT number at RTR")
	poller, err := transport.NewPoller(k.cq)
	require.NoError(t, err)
	dci, err := dc.NewDCI(k.pd, k.cq, dc.DCIConfig{SendDepth: 16, MaxSendSGE: 1, Port: 1})
	require.NoError(t, err)
	require.NoError(t, poller.Add(&dci.Queue))
	srq, err := transport.NewSharedReceiveQueue(k.pd, ctx.SRQConfig{Depth: 16})
	require.NoError(t, err)
	dct, err := dc.NewDCT(k.pd, k.cq, dc.DCTConfig{SRQ: srq, Key: kitKey, Port: 1})
	require.NoError(t, err)
	require.NoError(t, poller.Add(&dct.Queue))
	remote, err := dci.NewRemote(endpoint.Endpoint{Transport: endpoint.TransportDC, QPN: p.DCTNumber(), DCTNumber: p.DCTNumber(),
		DCAccessKey: cKey, LID: p.LID(), GID: p.GID(), MTU: ctx.MTU1024})
	require.NoError(t, err)
	kitDCT := dct.Endpoint()
	require.NoError(t, p.Address(kitDCT.LID, kitDCT.GID))

	for round := range 3 {
		// kit DCI → libmlx5 DCT.
		want := pattern(n, byte(0x20+round))
		copy(k.buf.Bytes(), want)
		require.NoError(t, p.PostSRQRecv(dstOff, n, uint64(300+round)))
		s, err := dci.Post(uint64(400+round), wqebuilder.Signaled, remote)
		require.NoError(t, err)
		require.NoError(t, s.SendImm(0x7170+uint32(round)).SGE(k.addr(0), n, k.mr.LKey()).FinishBlueFlame())
		sends := pollKit(poller, 1)
		require.Len(t, sends, 1)
		require.NoError(t, sends[0].Err())
		require.Equal(t, prm.CQEReq, sends[0].Opcode)
		require.Equal(t, prm.OpSendImm, sends[0].SendOpcode)
		require.Equal(t, uint64(400+round), sends[0].WRID)
		require.Equal(t, dci.QPN(), sends[0].QPN)
		recv := pollC(t, p)
		require.Equal(t, plainverbs.Completion{WRID: uint64(300 + round), Opcode: plainverbs.OpcodeRecv, ByteLen: n,
			Immediate: 0x7170 + uint32(round), HasImm: true, QPN: p.DCTNumber(), SourceQPN: dci.QPN()}, recv,
			"ibv_poll_cq: libmlx5 parsed the model's receive CQE of its DCT's SRQ")
		require.Equal(t, want, p.Buf()[dstOff:dstOff+n], "the bytes the kit's DC WQE gathered")

		// libmlx5 DCI → kit DCT.
		want = pattern(n, byte(0x60+round))
		copy(p.Buf(), want)
		require.NoError(t, srq.PostRecv(uint64(100+round), k.addr(kitRecv), n, k.mr.LKey()))
		require.NoError(t, p.SendImm(0, n, uint64(200+round), 0x8180+uint32(round), dct.QPN(), kitKey))
		sent := pollC(t, p)
		require.Equal(t, plainverbs.Completion{WRID: uint64(200 + round), Opcode: plainverbs.OpcodeSend, HasImm: true, QPN: p.DCIQPN()},
			sent, "ibv_poll_cq: the send completion of the DC WQE libmlx5 wrote")
		got := pollKit(poller, 1)
		require.Len(t, got, 1)
		require.NoError(t, got[0].Err())
		require.Equal(t, prm.CQERespSendImm, got[0].Opcode)
		require.Equal(t, uint64(100+round), got[0].WRID)
		require.Equal(t, uint32(n), got[0].ByteCount)
		require.Equal(t, 0x8180+uint32(round), got[0].Immediate)
		require.Equal(t, dct.QPN(), got[0].QPN, "the DCT number")
		require.Equal(t, p.DCIQPN(), got[0].SourceQPN, "libmlx5's DCI")
		require.Equal(t, want, k.buf.Bytes()[kitRecv:kitRecv+n], "the bytes libmlx5's DC WQE gathered")
	}
	require.NoError(t, remote.Close())
	require.NoError(t, dci.Close())
	require.NoError(t, dct.Close())
	require.NoError(t, srq.Close())
	p.Close()
	closeCrossSide(t, k)
}

// TestCrossCheckEnvironments runs the cross-check again in fresh
// processes with RoCE ports and with the write-command ABI.
func TestCrossCheckEnvironments(t *testing.T) {
	if os.Getenv(envChild) != "" {
		t.Skip("already a child run")
	}
	for _, c := range []struct{ name, link, abi string }{
		{"ethernet", "ethernet", ""},
		{"write-abi-ethernet", "ethernet", emulate.ABIWrite},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run", "^TestCrossCheckKitAndLibmlx5$|^TestCrossCheckDC$|^TestChildIsEmulated$", "-test.count", "1", "-test.v")
			cmd.Env = append(os.Environ(), envChild+"=1", emulate.EnvEmulate+"=1", emulate.EnvLink+"="+c.link, emulate.EnvABI+"="+c.abi)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			require.Contains(t, string(out), "--- PASS: TestCrossCheckKitAndLibmlx5/RC")
			require.Contains(t, string(out), "--- PASS: TestCrossCheckKitAndLibmlx5/UD")
			require.Contains(t, string(out), "--- PASS: TestCrossCheckDC")
			require.Contains(t, string(out), "--- PASS: TestChildIsEmulated")
		})
	}
}
