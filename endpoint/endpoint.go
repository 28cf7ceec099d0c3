package endpoint

import (
	"fmt"
	"math"
	"net/netip"
	"strings"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/names"
)

// Transport is the kind of queue an endpoint reaches.
type Transport uint8

// The transports. The zero value is not a transport, so an endpoint left
// unfilled does not validate.
const (
	// TransportRC is a reliable connected queue pair.
	TransportRC Transport = 1
	// TransportUD is an unreliable datagram queue pair, reached with a qkey.
	TransportUD Transport = 2
	// TransportDC is a dynamically connected target (DCT), reached by DCT
	// number and DC access key from any DC initiator.
	TransportDC Transport = 3
)

var transportNames = [...]string{TransportRC: "RC", TransportUD: "UD", TransportDC: "DC"}

// String returns "RC", "UD", "DC" or "Transport(n)".
func (t Transport) String() string { return names.Of(t, transportNames[:], "Transport") }

// Valid reports whether t is one of the defined transports.
func (t Transport) Valid() bool { return t >= TransportRC && t <= TransportDC }

// AccessKnown is every access bit an endpoint may carry for a region
// (local write, which verbs requires alongside remote write and atomics,
// remote write, read and atomic, zero-based); any other bit is an error
// (errAccess). The flags a memory region was registered with can be copied
// in after masking with it.
const AccessKnown = ctx.AccessLocalWrite | ctx.AccessRemoteWrite | ctx.AccessRemoteRead | ctx.AccessRemoteAtomic | ctx.AccessZeroBased

// RemoteRegion is a registered memory region as the peer sees it: where it
// is, how long, the rkey that unlocks it and what the peer may do there.
type RemoteRegion struct {
	// Address is the first byte's address in the owner's address space (or
	// 0 with ctx.AccessZeroBased).
	Address uint64
	// Length is the region's size in bytes. Address+Length must not exceed
	// 2^64-1.
	Length uint64
	// RemoteKey is the rkey of the region.
	RemoteKey uint32
	// Access is what the peer may do with the region.
	Access ctx.Access
}

// Contains reports whether the length bytes starting at address lie inside
// r. A zero length is contained when address is within [Address,
// Address+Length].
func (r RemoteRegion) Contains(address, length uint64) bool {
	if address < r.Address {
		return false
	}
	offset := address - r.Address
	return offset <= r.Length && length <= r.Length-offset
}

// Allows reports whether every bit of want is granted by r.
func (r RemoteRegion) Allows(want ctx.Access) bool { return r.Access&want == want }

// String formats r as "[addr,+len) rkey=0x… REMOTE_READ".
func (r RemoteRegion) String() string {
	return fmt.Sprintf("[%#x,+%d) rkey=%#x %v", r.Address, r.Length, r.RemoteKey, r.Access)
}

// Limits of an endpoint's fields.
const (
	// maxQPN is the largest QPN (and DCT number): they are 24-bit values.
	maxQPN = 1<<24 - 1
	// MaxRegions is the most remote regions one endpoint may carry.
	MaxRegions = 64
)

// Endpoint is what a peer needs to reach one queue. The fields that a
// transport does not use must be zero (QKey for RC and DC, DCTNumber and
// DCAccessKey for RC and UD) so that the encoding stays canonical.
type Endpoint struct {
	// Transport is the kind of queue: RC, UD or DC.
	Transport Transport
	// QPN is the queue pair number (24 bits). For DC it may name the DC
	// initiator and is informational; the peer reaches DCTNumber.
	QPN uint32
	// LID is the port's local identifier on InfiniBand; 0 on RoCE.
	LID uint16
	// GID is the port's global identifier (RoCE, routed InfiniBand).
	GID ctx.GID
	// GIDIndex is the index of GID in the port's GID table.
	GIDIndex uint8
	// PSN is the first packet sequence number the queue sends (24 bits);
	// the peer uses it as its receive PSN.
	PSN uint32
	// MTU is the path MTU the queue was or will be configured with.
	MTU ctx.MTU
	// DCTNumber is the DCT's number (24 bits), DC only.
	DCTNumber uint32
	// DCAccessKey is the DC access key the DCT checks, DC only.
	DCAccessKey uint64
	// QKey is the queue key the UD queue pair checks, UD only.
	QKey uint32
	// Regions are the memory regions the peer may use, at most MaxRegions.
	Regions []RemoteRegion
}

// Validate checks every field of e. The error, if any, is an [*Error] that
// matches [ctx.ErrInvalidArgument] and the specific sentinel with errors.Is.
func (e Endpoint) Validate() error {
	if err := e.check(); err != nil {
		err.Op = opValidate
		return err
	}
	return nil
}

// check runs the field checks shared by Validate, MarshalBinary and
// UnmarshalBinary; the caller sets Op.
func (e Endpoint) check() *Error {
	if !e.Transport.Valid() {
		return &Error{Field: "transport", Offset: offTransport, Err: errUnknownTransport,
			Detail: fmt.Sprintf("%d is not RC (1), UD (2) or DC (3)", uint8(e.Transport))}
	}
	if !e.MTU.Valid() {
		return &Error{Field: "mtu", Offset: offMTU, Err: errRange,
			Detail: fmt.Sprintf("%d is not an IBV_MTU value (1..5)", uint8(e.MTU))}
	}
	if e.QPN > maxQPN {
		return &Error{Field: "qpn", Offset: offQPN, Err: errRange,
			Detail: fmt.Sprintf("%#x exceeds 24 bits", e.QPN)}
	}
	if e.PSN > ctx.MaxPSN {
		return &Error{Field: "psn", Offset: offPSN, Err: errRange,
			Detail: fmt.Sprintf("%#x exceeds 24 bits", e.PSN)}
	}
	if e.DCTNumber > maxQPN {
		return &Error{Field: "dct number", Offset: offDCTNumber, Err: errRange,
			Detail: fmt.Sprintf("%#x exceeds 24 bits", e.DCTNumber)}
	}
	if e.Transport != TransportUD && e.QKey != 0 {
		return &Error{Field: "qkey", Offset: offQKey, Err: errNotApplicable,
			Detail: fmt.Sprintf("%#x set on an endpoint of transport %v", e.QKey, e.Transport)}
	}
	if e.Transport != TransportDC && e.DCTNumber != 0 {
		return &Error{Field: "dct number", Offset: offDCTNumber, Err: errNotApplicable,
			Detail: fmt.Sprintf("%#x set on an endpoint of transport %v", e.DCTNumber, e.Transport)}
	}
	if e.Transport != TransportDC && e.DCAccessKey != 0 {
		return &Error{Field: "dc access key", Offset: offDCAccessKey, Err: errNotApplicable,
			Detail: fmt.Sprintf("%#x set on an endpoint of transport %v", e.DCAccessKey, e.Transport)}
	}
	if len(e.Regions) > MaxRegions {
		return &Error{Field: "region count", Offset: offRegionCount, Err: ErrTooManyRegions,
			Detail: fmt.Sprintf("%d regions, at most %d", len(e.Regions), MaxRegions)}
	}
	for i, r := range e.Regions {
		at := headerSize + bodyFixedSize + i*regionSize
		if r.Length > math.MaxUint64-r.Address {
			return &Error{Field: fmt.Sprintf("region %d", i), Offset: at + regionOffLength, Err: errRegionOverflow,
				Detail: fmt.Sprintf("address %#x + length %#x wraps past 2^64", r.Address, r.Length)}
		}
		if r.Access&^AccessKnown != 0 {
			return &Error{Field: fmt.Sprintf("region %d access", i), Offset: at + regionOffAccess, Err: errAccess,
				Detail: fmt.Sprintf("unknown bits %#x", uint32(r.Access&^AccessKnown))}
		}
	}
	return nil
}

// Equal reports whether e and o describe the same endpoint. A nil and an
// empty region list are equal.
func (e Endpoint) Equal(o Endpoint) bool {
	if e.Transport != o.Transport || e.QPN != o.QPN || e.LID != o.LID || e.GID != o.GID ||
		e.GIDIndex != o.GIDIndex || e.PSN != o.PSN || e.MTU != o.MTU || e.DCTNumber != o.DCTNumber ||
		e.DCAccessKey != o.DCAccessKey || e.QKey != o.QKey || len(e.Regions) != len(o.Regions) {
		return false
	}
	for i := range e.Regions {
		if e.Regions[i] != o.Regions[i] {
			return false
		}
	}
	return true
}

// String formats the fields that matter for e's transport on one line, e.g.
// "RC qpn=0x1a lid=3 gid=fe80::1 gid_index=0 psn=0x123 mtu=4096 regions=1".
func (e Endpoint) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v qpn=%#x", e.Transport, e.QPN)
	if e.Transport == TransportDC {
		fmt.Fprintf(&b, " dct=%#x dc_key=%#x", e.DCTNumber, e.DCAccessKey)
	}
	if e.Transport == TransportUD {
		fmt.Fprintf(&b, " qkey=%#x", e.QKey)
	}
	fmt.Fprintf(&b, " lid=%d gid=%v gid_index=%d psn=%#x mtu=%v regions=%d",
		e.LID, netip.AddrFrom16(e.GID), e.GIDIndex, e.PSN, e.MTU, len(e.Regions))
	return b.String()
}
