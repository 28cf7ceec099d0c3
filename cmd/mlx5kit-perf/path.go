package main

import (
	"fmt"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/perftool"
)

// pathCheck returns what is wrong with -m and -T, or "".
func (c config) pathCheck() string {
	if c.mtu != 0 {
		if _, err := ctx.MTUFromBytes(c.mtu); err != nil {
			return fmt.Sprintf("-m %d: want 256, 512, 1024, 2048 or 4096", c.mtu)
		}
	}
	if c.tclass < 0 || c.tclass > 255 {
		return fmt.Sprintf("-T %d: want 0 to 255", c.tclass)
	}
	return ""
}

// mtuFor returns the MTU of -m (bytes, 0 for none) on a port whose active
// MTU is active: an MTU above it is an error (perftest lowers it to the
// active one instead, saying so), the port number and device name in it.
func mtuFor(bytes int, active ctx.MTU, port int, device string) (ctx.MTU, error) {
	if bytes == 0 {
		return 0, nil
	}
	m, err := ctx.MTUFromBytes(bytes)
	if err != nil {
		return 0, fmt.Errorf("-m %d: %w", bytes, err)
	}
	if m > active {
		return 0, fmt.Errorf("-m %d: above the active MTU of port %d of %s (%d bytes)", bytes, port, device, active.Bytes())
	}
	return m, nil
}

// limitMTU gives the ends on s the MTU of -m, refused when it is above
// the port's active MTU: each end's queue pair announces it, and so does
// every lane's (-c UD|DC, -q), which openEnds creates with it.
func limitMTU(cfg config, s *perftool.Setup, ends ...*end) error {
	if cfg.mtu == 0 {
		return nil
	}
	port, err := s.Context.QueryPort(uint8(cfg.port))
	if err != nil {
		return err
	}
	m, err := mtuFor(cfg.mtu, port.ActiveMTU, cfg.port, s.Context.DeviceName())
	if err != nil {
		return err
	}
	for _, x := range ends {
		x.mtu = m
	}
	return nil
}

// capMTU returns m, lowered to -m when that is smaller.
func (x *end) capMTU(m ctx.MTU) ctx.MTU {
	if x.mtu.Valid() && x.mtu < m {
		return x.mtu
	}
	return m
}

// pathNotes are mlx5kit-perf's notes on the path to peer from a port of
// link layer link: -T has no GRH to go in on InfiniBand by LID.
func pathNotes(cfg config, link ctx.LinkLayer, peer endpoint.Endpoint) []string {
	if cfg.tclass != 0 && link != ctx.LinkLayerEthernet && peer.LID != 0 {
		return []string{fmt.Sprintf("-T %d: the path to the peer goes by LID, with no GRH: the traffic class is not sent", cfg.tclass)}
	}
	return nil
}
