package ibpath_test

import (
	"encoding/binary"
	"testing"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/ibpath"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/monocq"
)

// FuzzReply feeds arbitrary receive CQEs and GRH bytes (what a remote
// sender controls) to Reply: it must never panic, and a path it returns
// must validate and point back at the CQE's source QPN.
func FuzzReply(f *testing.F) {
	g6 := make([]byte, 40)
	binary.BigEndian.PutUint32(g6, 6<<28|0x12345)
	g6[8], g6[24] = 0xfe, 0xfe
	g4 := make([]byte, 40)
	g4[20] = 0x45
	f.Add(uint32(1<<28|0x42), uint16(7), uint8(prm.CQERespSend), g6)
	f.Add(uint32(1<<28|0x42), uint16(7), uint8(prm.CQERespSendImm), g4)
	f.Add(uint32(0x42), uint16(3), uint8(prm.CQERespSend), []byte(nil))
	f.Add(uint32(3<<28|0xffffff), uint16(0xffff), uint8(prm.CQERespErr), []byte("short"))
	f.Fuzz(func(t *testing.T, flagsRQPN uint32, slid uint16, op uint8, grh []byte) {
		var c monocq.CQE
		binary.BigEndian.PutUint32(c[prm.CQEFlagsRQPN:], flagsRQPN)
		binary.BigEndian.PutUint16(c[prm.CQESLID:], slid)
		c[prm.CQEOpOwn] = op << 4
		local := ibpath.Default()
		local.SQPN, local.QKey = 0x100, 0x1111
		p, err := ibpath.Reply(&c, grh, local, []ctx.GIDEntry{{Index: 0, GID: ctx.GID{0xfe}}})
		if err != nil {
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("reply path does not validate: %v (%+v)", err, p)
		}
		if p.DQPN != c.SourceQP() || p.SQPN != local.SQPN {
			t.Fatalf("reply QPNs %#x -> %#x, CQE source %#x", p.SQPN, p.DQPN, c.SourceQP())
		}
		if p.GlobalRoute != c.HasGRH() {
			t.Fatalf("GRH %v, reply global %v", c.HasGRH(), p.GlobalRoute)
		}
	})
}
