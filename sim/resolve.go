package sim

import (
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/addrvec"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
)

// neighbourMAC returns the MAC address of the Ethernet port of the model
// whose GID table holds gid: what the kernel's neighbour resolution
// (ib_resolve_eth_dmac) finds for a unicast GID on a RoCE fabric of
// these devices. The fabric is this Fabric's devices and, when it joined
// a shared fabric or a TCP link, those of the other live processes on
// it, which answer for their GIDs as hosts of one subnet answer ARP and
// neighbour solicitations. ok is false when no Ethernet port of the
// fabric has the GID.
func (f *Fabric) neighbourMAC(gid ctx.GID) (mac [6]byte, ok bool) {
	f.mu.Lock()
	for _, h := range f.hcas {
		if h.link == ctx.LinkLayerEthernet && h.hasGID(gid) {
			f.mu.Unlock()
			return h.mac, true
		}
	}
	if f.opts.LinkLayer != ctx.LinkLayerEthernet {
		f.mu.Unlock()
		return mac, false
	}
	i, ok := hcaIndexOfGID(gid)
	if !ok {
		f.mu.Unlock()
		return mac, false
	}
	// Another process numbers its HCAs by its slot as joinLocked and
	// joinLinkLocked number this one's: the GID names the HCA, and so
	// the slot, which must be another's and alive, and the HCA, which
	// that process must have.
	alive := false
	if sh := f.shm; sh != nil {
		s := i / shmMaxDevices
		alive = s != sh.slot && s < shmMaxSlots && i%shmMaxDevices < sh.peerDevices(s)
	}
	l := f.tcp
	f.mu.Unlock()
	if l != nil {
		// Not under f.mu, as in Reaches.
		s := tcpSlotBase + i/tcpMaxDevices
		alive = s != l.slot && s < tcpSlotBase+tcpSlots && i%tcpMaxDevices < l.peerDevices(s)
	}
	if !alive {
		return mac, false
	}
	h := newHCA(i, ctx.LinkLayerEthernet)
	if !h.hasGID(gid) {
		return mac, false
	}
	return h.mac, true
}

// resolveRMAC returns the destination MAC an address handle to gid
// carries on an Ethernet port, resolved as the kernel resolves it
// (addrvec.ResolveMAC, with the fabric's ports as neighbours). A GID that
// nothing answers for leaves it zero: the kernel would fail the handle
// with ETIMEDOUT, the model, which delivers by GID, keeps it.
func (f *Fabric) resolveRMAC(gid ctx.GID) [6]byte {
	mac, _ := addrvec.ResolveMAC(gid, f.neighbourMAC)
	return mac
}

// PortMAC returns the MAC address of the Ethernet port of a device of the
// model (by name); ok is false for an unknown device or an InfiniBand
// port.
func (f *Fabric) PortMAC(device string) (mac [6]byte, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, h := range f.hcas {
		if h.name == device && h.link == ctx.LinkLayerEthernet {
			return h.mac, true
		}
	}
	return mac, false
}

// The functions the kernel-side model (package cgo/emulate) reaches through
// internal/simadopt.
func init() {
	simadopt.CompletionQueue = adoptCompletionQueue
	simadopt.ResizeCompletionQueue = resizeCompletionQueue
	simadopt.QueuePair = adoptQueuePair
	simadopt.ForgetRegister = forgetRegister
	simadopt.SharedReceiveQueue = adoptSharedReceiveQueue
	simadopt.ProtectionDomainNumber = protectionDomainNumber
	simadopt.QueuePairAttributes = queuePairAttributes
	simadopt.ModifyQueuePair = modifyQueuePair
	simadopt.SharedReceiveQueueNumber = sharedReceiveQueueNumber
	simadopt.SubscribeAsyncEvents = subscribeAsyncEvents
	simadopt.Provider = func(fabric any) provider.Provider {
		f, ok := fabric.(*Fabric)
		if !ok {
			return nil
		}
		return fabricProvider{f}
	}
	simadopt.NeighbourMAC = func(p any, gid ctx.GID) ([6]byte, bool) {
		f, ok := p.(*Fabric)
		if !ok {
			return [6]byte{}, false
		}
		return f.neighbourMAC(gid)
	}
	simadopt.Idle = func(p any) func() {
		f, ok := p.(*Fabric)
		if !ok {
			return nil
		}
		return f.idle
	}
	simadopt.LookupMR = func(p any, key uint32) (simadopt.MRInfo, bool) {
		f, ok := p.(*Fabric)
		if !ok {
			return simadopt.MRInfo{}, false
		}
		return f.lookupMR(key)
	}
	simadopt.LookupCQ = func(p any, cqn uint32) (simadopt.CQInfo, bool) {
		f, ok := p.(*Fabric)
		if !ok {
			return simadopt.CQInfo{}, false
		}
		return f.lookupCQ(cqn)
	}
	simadopt.LookupSRQ = func(p any, srqn uint32) (simadopt.SRQInfo, bool) {
		f, ok := p.(*Fabric)
		if !ok {
			return simadopt.SRQInfo{}, false
		}
		return f.lookupSRQ(srqn)
	}
}
