package newqp

import (
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/fieldcheck"
	"github.com/mlx5kit/mlx5kit/internal/sqsize"
)

// Port is what a queue pair's endpoint says about the local port.
type Port struct {
	Number uint8
	LID    uint16
	// GID is the local GID table entry the queue pair sends from: the one
	// its configuration selected (ctx.Context.ChooseGID). On InfiniBand it
	// may be empty (index 0, zero GID) when the table has no such entry.
	GID  ctx.GIDEntry
	MTU  ctx.MTU
	Link ctx.LinkLayer
}

// QueryPort reads the port's LID, active MTU and link layer and the GID
// that gid selects (ctx.Context.ChooseGID). Without such a GID, QueryPort
// fails on Ethernet, where the GID is the address, and leaves the GID zero
// on InfiniBand, where a GID is only needed for a GRH; an index past the
// port's GID table fails on either.
func QueryPort(c *ctx.Context, port uint8, gid ctx.GIDSelector) (Port, error) {
	if port == 0 {
		port = 1
	}
	pa, err := c.QueryPort(port)
	if err != nil {
		return Port{}, err
	}
	p := Port{Number: port, LID: pa.LID, MTU: pa.ActiveMTU, Link: pa.LinkLayer}
	e, err := c.ChooseGID(port, gid)
	switch {
	case err == nil:
		p.GID = e
	case p.Link != ctx.LinkLayerEthernet && errors.Is(err, ctx.ErrNotFound):
		i, explicit := gid.Index()
		if explicit && int(i) >= pa.GIDTableLen {
			// Past the table no GRH can name it (a modify to RTR
			// with it fails with EINVAL): a wrong configuration.
			return Port{}, fmt.Errorf("local GID %v: the port's GID table has %d entries: %w", gid, pa.GIDTableLen, ctx.ErrInvalidArgument)
		}
		p.GID = ctx.GIDEntry{Index: int(i), Port: port}
	case errors.Is(err, ctx.ErrNotFound):
		return Port{}, fmt.Errorf("local GID %v (a RoCE port is addressed by GID): %w (%w)", gid, err, ctx.ErrInvalidArgument)
	default:
		return Port{}, fmt.Errorf("local GID %v: %w", gid, err)
	}
	return p, nil
}

// Endpoint returns the endpoint of a queue pair on p.
func (p Port) Endpoint(t endpoint.Transport, qpn, psn uint32) endpoint.Endpoint {
	return endpoint.Endpoint{
		Transport: t,
		QPN:       qpn,
		LID:       p.LID,
		GID:       p.GID.GID,
		GIDIndex:  uint8(p.GID.Index),
		PSN:       psn,
		MTU:       p.MTU,
	}
}

// PathTo returns the address of remote as seen from p: by LID on
// InfiniBand, by GID (with a GRH from the local GID index) on RoCE. A
// remote with no address the port can use (no GID on RoCE, no LID on
// InfiniBand, whose switches forward every packet by its DLID, GRH or
// not, and where an active port always has a LID: a peer's endpoint may
// say anything) is refused with an error wrapping ctx.ErrInvalidArgument,
// rather than addressed to the zero GID or to DLID 0, and so is an RC or
// DC remote addressed by a multicast or the permissive LID on InfiniBand.
func (p Port) PathTo(remote endpoint.Endpoint, sl uint8) (ctx.AddressAttr, error) {
	a := ctx.AddressAttr{Port: p.Number, SL: sl}
	if p.Link != ctx.LinkLayerEthernet && remote.LID == 0 {
		return ctx.AddressAttr{}, fmt.Errorf("remote endpoint %v has no LID, which addresses a port on InfiniBand: %w", remote, ctx.ErrInvalidArgument)
	}
	if p.Link == ctx.LinkLayerEthernet {
		if remote.GID.IsZero() {
			return ctx.AddressAttr{}, fmt.Errorf("remote endpoint %v has no GID, which addresses a port on RoCE: %w", remote, ctx.ErrInvalidArgument)
		}
		a.GlobalRoute = true
		a.DGID = remote.GID
		a.SGIDIndex = uint8(p.GID.Index)
		a.HopLimit = 64
	} else {
		if remote.LID >= FirstMulticastLID && remote.Transport != endpoint.TransportUD {
			return ctx.AddressAttr{}, fmt.Errorf("remote endpoint %v: LID %#x is a multicast LID or the permissive one, which no %v queue pair is reached by: %w",
				remote, remote.LID, remote.Transport, ctx.ErrInvalidArgument)
		}
		a.DLID = remote.LID
	}
	return a, nil
}

// FirstMulticastLID is the first LID that names no port: 0xC000 to 0xFFFE
// are multicast LIDs and 0xFFFF is the permissive LID. Only UD reaches a
// multicast group.
const FirstMulticastLID = 0xc000

// PathMTU returns the smaller of the local port's and the remote's MTU.
func (p Port) PathMTU(remote endpoint.Endpoint) ctx.MTU {
	m := p.MTU
	if r := remote.MTU; r >= ctx.MTU256 && r < m {
		m = r
	}
	return m
}

// RandomPSN returns a random 24-bit packet sequence number.
func RandomPSN() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint32(b[:]) & ctx.MaxPSN
}

// CheckCaps refuses a configuration of a queue pair of type t beyond what
// the device reports, with a message naming the limit: the send queue
// against the limits of the type (sqsize.Check: a depth, SGE count or
// inline size the type's WQEs leave no room for), the receive queue (when
// hasRQ) against max_qp_wr and the receive WQE's scatter limit (MaxRecvSGE,
// or max_sge where the provider could not tell). A provider that reports no send WQE
// size has its send queue checked against max_qp_wr, max_sge and the RC
// inline size only.
func CheckCaps(a ctx.DeviceAttr, t ctx.QPType, caps ctx.QueuePairCaps, hasRQ bool) error {
	hasSQ := t != ctx.QPTypeDCT
	if hasSQ && caps.SendDepth == 0 {
		return fmt.Errorf("send depth 0: %w", ctx.ErrInvalidArgument)
	}
	type limit struct {
		name  string
		v     uint32
		max   uint32
		check bool
	}
	sizedSQ := hasSQ && a.MaxSendWQESize != 0
	for _, l := range []limit{
		{"send depth", caps.SendDepth, a.MaxQPWR, hasSQ && !sizedSQ},
		{"receive depth", caps.RecvDepth, a.MaxQPWR, hasRQ},
		{"max send SGE", caps.MaxSendSGE, a.MaxSGE, hasSQ && !sizedSQ},
		{"max receive SGE", caps.MaxRecvSGE, cmp.Or(a.MaxRecvSGE, a.MaxSGE), hasRQ},
		{"max inline", caps.MaxInline, a.MaxInline, hasSQ && !sizedSQ},
	} {
		if l.check && l.max != 0 && l.v > l.max {
			return fmt.Errorf("%s %d above the device's %d: %w", l.name, l.v, l.max, ctx.ErrInvalidArgument)
		}
	}
	if sizedSQ {
		return sqsize.Check(t, caps, sqsize.DeviceOf(a))
	}
	return nil
}

// Knob resolves a configuration knob where 0 picks the default and a
// negative value means 0 (the convention of net.Dialer.KeepAlive).
func Knob(v int, def, max uint8) (uint8, error) {
	switch {
	case v == 0:
		return def, nil
	case v < 0:
		return 0, nil
	case v > int(max):
		return 0, fmt.Errorf("%d above %d: %w", v, max, ctx.ErrInvalidArgument)
	}
	return uint8(v), nil
}

// Setting is one knob of a configuration for Settings: its name in
// errors, the configured value, its default and maximum, and where the
// resolved value goes.
type Setting struct {
	Name         string
	Value        int
	Default, Max uint8
	Dst          *uint8
}

// Settings resolves each setting with Knob into its Dst and refuses the
// first one out of range, naming it.
func Settings(settings ...Setting) error {
	for _, k := range settings {
		v, err := Knob(k.Value, k.Default, k.Max)
		if err != nil {
			return fmt.Errorf("%s: %w", k.Name, err)
		}
		*k.Dst = v
	}
	return nil
}

// Field is a configuration value and the range of the verbs or PRM field it
// goes into, for CheckFields.
type Field = fieldcheck.Field

// CheckFields refuses the first field outside its range, before anything is
// created, with an error that names the field, the value and the range and
// wraps ctx.ErrInvalidArgument: a value wider than its field would otherwise be
// masked by the provider or the device, silently.
func CheckFields(fields ...Field) error { return fieldcheck.Check(ctx.ErrInvalidArgument, fields...) }

// PortField is a configuration's port number (0 means 1) against the
// device's ports.
func PortField(dev ctx.DeviceAttr, port uint8) Field {
	if port == 0 {
		port = 1
	}
	n := uint64(dev.PhysPortCount)
	if n == 0 {
		n = 255 // not reported: the query of the port decides
	}
	return Field{Name: "port", Value: uint64(port), Min: 1, Max: n}
}

// SLField is a configuration's service level against the SL field of the
// paths from p: 4 bits on InfiniBand, 3 on an Ethernet (RoCE) port, where
// it is the priority of the VLAN tag and rdma-core and the kernel keep
// sl & 7.
func SLField(p Port, sl uint8) Field {
	max := uint64(fieldcheck.MaxSL)
	if p.Link == ctx.LinkLayerEthernet {
		max = fieldcheck.MaxRoCESL
	}
	return Field{Name: "SL", Value: uint64(sl), Max: max}
}
