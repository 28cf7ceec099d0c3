package sim

import (
	"fmt"
	"slices"
	"syscall"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/provider"
)

// The model's port and device events.
//
// A port is up (ACTIVE) or down. SetPortState takes a port down: QueryPort
// reports PortStateDown and every open device of the HCA gets PORT_ERR. No
// packet leaves or reaches a port that is down: a request of an RC QP or a
// DC initiator on it (or towards a QP on a port that is down) is not
// answered, so the requester retries every local ACK timeout and, after
// retry_cnt retries, completes with RETRY_EXC_ERR and moves to error,
// flushing the rest of its work, as a ConnectX does when the link stays
// down longer than its retries last. A UD send completes successfully and
// its packet is lost. A QP that sends nothing notices nothing: its state
// stays what it was. Bringing the port up again raises PORT_ACTIVE; a QP
// still retrying then gets its answer, and one in error stays there.
//
// FailDevice is a fatal error of the HCA (a firmware or PCI failure): every
// open device of the HCA gets DEVICE_FATAL, every QP on it moves to error
// and flushes its work (the model keeps writing those flush completions),
// and afterwards every verb on the device fails with EIO but the ones that
// destroy, deallocate or move a QP to RESET or ERROR, which succeed, so
// that everything can be closed. That is mlx5_core's rule for the command
// interface in the internal-error state (mlx5_internal_err_ret_value); an
// HCA does not recover: the devices must be closed and opened again, and
// the model keeps the HCA failed until Fabric.RecoverDevice.

// errDeviceFatal is the error of a verb on a device after FailDevice: it
// wraps syscall.EIO (ctx.OpError.Errno reports it).
func errDeviceFatal(op string) error {
	return provider.Errorf(op, "%s after a fatal device error: %w", op, syscall.EIO)
}

// qpPort is the port a QP sends from: the one it was brought to INIT on,
// port 1 before that.
func qpPort(q *qp) uint8 {
	if q.attr.Port == 0 {
		return 1
	}
	return q.attr.Port
}

// portDown reports whether port of the HCA is down.
func (h *hca) portDown(port uint8) bool {
	return int(port) < len(h.down) && h.down[port]
}

// qpOffline reports whether no packet reaches or leaves q: its port is
// down or its HCA failed.
func qpOffline(q *qp) bool {
	h := q.dev.h
	return h.fatal || h.portDown(qpPort(q))
}

// hcaByName returns the HCA named name ("" is the first), or nil.
func (f *Fabric) hcaByName(name string) *hca {
	if name == "" {
		if len(f.hcas) == 0 {
			return nil // a zero Fabric
		}
		return f.hcas[0]
	}
	for _, h := range f.hcas {
		if h.name == name {
			return h
		}
	}
	return nil
}

// errZeroFabric is the cause of the errors of a Fabric not made by New.
var errZeroFabric = fmt.Errorf("a Fabric not made by sim.New: %w", ctx.ErrInvalidArgument)

// noHCA is why a device name found no HCA: ctx.ErrNotFound, or
// errZeroFabric for a Fabric without HCAs, one not made by New.
func (f *Fabric) noHCA() error {
	if len(f.hcas) == 0 {
		return errZeroFabric
	}
	return ctx.ErrNotFound
}

// SetPortState takes a port of the HCA named dev ("sim0", …; "" is the
// first) down (up false) or up again. Each change raises PORT_ERR or
// PORT_ACTIVE on every open device of the HCA; setting the state a port
// already has raises nothing. See the package's rules for what a port that
// is down does to traffic. A port the HCA does not have is an error
// wrapping ctx.ErrInvalidArgument.
func (f *Fabric) SetPortState(dev string, port uint8, up bool) error {
	const op = "sim: set port state"
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.hcaByName(dev)
	if h == nil {
		return provider.Errorf(op, "device %q: %w", dev, f.noHCA())
	}
	if port < 1 || port > f.opts.Ports {
		return provider.Errorf(op, "port %d of %d: %w", port, f.opts.Ports, ctx.ErrInvalidArgument)
	}
	if h.portDown(port) == !up {
		return nil
	}
	if len(h.down) <= int(port) {
		h.down = append(h.down, make([]bool, int(port)+1-len(h.down))...)
	}
	h.down[port] = !up
	ev := ctx.AsyncEvent{Type: ctx.EventPortError, Port: port, Detail: "link down"}
	if up {
		ev = ctx.AsyncEvent{Type: ctx.EventPortActive, Port: port, Detail: "link up"}
	}
	for _, d := range h.open {
		d.postEvent(ev)
	}
	return nil
}

// FailDevice raises a fatal error on the HCA named dev ("" is the first):
// DEVICE_FATAL on every open device of it, every QP of those devices to
// error with its work flushed, and EIO from every later verb but those
// that destroy. See the package's rules. Failing a failed HCA does nothing.
func (f *Fabric) FailDevice(dev string) error {
	const op = "sim: fail device"
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.hcaByName(dev)
	if h == nil {
		return provider.Errorf(op, "device %q: %w", dev, f.noHCA())
	}
	if h.fatal {
		return nil
	}
	h.fatal = true
	// Every QP moves to error and raises nothing, a QP on an SRQ no
	// QP_LAST_WQE_REACHED either: mlx5_ib's handling of the internal
	// error (mlx5_ib_handle_internal_error) runs the CQs' completion
	// handlers and dispatches DEVICE_FATAL, and the firmware raises no
	// event any more.
	for _, q := range f.qpList {
		if q.dev.h == h {
			q.enterError()
		}
	}
	for _, d := range h.open {
		d.postEvent(ctx.AsyncEvent{Type: ctx.EventDeviceFatal, Detail: "fatal device error"})
	}
	return nil
}

// RecoverDevice clears the fatal error of the HCA named dev, as a reset of
// the adapter does: devices opened afterwards work. Devices open during the
// failure stay failed (their verbs keep failing with EIO), as a
// disassociated ibv_context does: close them and open the device again.
func (f *Fabric) RecoverDevice(dev string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.hcaByName(dev)
	if h == nil {
		return provider.Errorf("sim: recover device", "device %q: %w", dev, f.noHCA())
	}
	if !h.fatal {
		return nil
	}
	h.fatal = false
	for _, d := range h.open {
		d.failed = true
	}
	return nil
}

// deadLocked reports whether the device's verbs fail with EIO: its HCA
// failed while it was open (f.mu held).
func (d *device) deadLocked() bool { return d.h.fatal || d.failed }

// dead is deadLocked taking f.mu.
func (d *device) dead() bool {
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	return d.deadLocked()
}

// opened records an open device of the HCA (f.mu held).
func (h *hca) opened(d *device) { h.open = append(h.open, d) }

// closed forgets an open device of the HCA (f.mu held).
func (h *hca) closedDevice(d *device) {
	if i := slices.Index(h.open, d); i >= 0 {
		h.open = slices.Delete(h.open, i, i+1)
	}
}

// portStateOf returns the state QueryPort reports for port.
func (h *hca) portStateOf(port uint8) ctx.PortState {
	if h.portDown(port) {
		return ctx.PortStateDown
	}
	return ctx.PortStateActive
}

// FailCQ moves a CQ to error as an overrun does: CQ_ERR is raised on its
// device, no CQE is written to it any more, and a QP whose completion
// finds it in error moves to error with QP_FATAL. Failing a CQ in error
// does nothing.
func (f *Fabric) FailCQ(cqn uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.cqs[cqn]
	if c == nil {
		return provider.Errorf("sim: fail CQ", "CQN %#x: %w", cqn, ctx.ErrNotFound)
	}
	if c.errored {
		return nil
	}
	c.errored = true
	c.errDetail = "injected fault"
	c.dev.postEvent(ctx.AsyncEvent{Type: ctx.EventCQError, CQN: c.cqn, Detail: c.errDetail})
	return nil
}
