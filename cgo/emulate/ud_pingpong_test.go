//go:build cgo && linux

package emulate_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/cgo/emulate"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
	"github.com/mlx5kit/mlx5kit/sim"
)

// TestUDPingPongUnderPreload compiles testdata/ud_pingpong.c, two UD QPs
// of one process exchanging 100 datagrams each way through ibv_create_ah,
// ibv_post_recv, ibv_post_send and ibv_poll_cq of libmlx5 as packaged,
// and runs it with the emulation preloaded, over both ABIs and both link
// layers: on RoCE the address vector carries the MAC the kernel resolved
// (the model's port MAC), and CREATE_AH refuses an address no port has.
func TestUDPingPongUnderPreload(t *testing.T) {
	prog, lib := cProgram(t, "ud_pingpong", "-lmlx5")
	devs, err := simadopt.Provider(emulate.Fabric()).Devices()
	require.NoError(t, err)

	for _, abi := range []string{"", emulate.ABIWrite} {
		for _, link := range []string{"infiniband", "ethernet"} {
			t.Run("abi="+abi+",link="+link, func(t *testing.T) {
				out := runPreloaded(t, prog, lib, abi, link)
				s := out
				require.Contains(t, s, "link "+link+"\n")
				require.Contains(t, s, "rounds 100 sends 200 recvs 200 bytes 59200 mismatches 0 wrong sources 0\n")
				require.Contains(t, s, "done\n")
				if link == "infiniband" {
					require.Contains(t, s, "ah rmac 00:00:00:00:00:00\n", "no MAC on InfiniBand")
					return
				}
				// A RoCE fabric like the child's has the same MACs.
				roce := sim.New(sim.Options{LinkLayer: ctx.LinkLayerEthernet})
				defer roce.Close()
				mac, ok := roce.PortMAC(devs[0].Name)
				require.True(t, ok)
				require.Contains(t, s, fmt.Sprintf("ah rmac %02x:%02x:%02x:%02x:%02x:%02x\n", mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]))
				require.Contains(t, s, "ah without grh: Invalid argument\n")
				require.Contains(t, s, "ah to unknown gid: Connection timed out\n")
			})
		}
	}
}
