package ctx

import (
	"fmt"
	"net/netip"
	"strconv"
)

// GIDSelector says which entry of a port's GID table a queue pair sends
// from (the SGID index of its path). The zero value chooses one with
// ChooseGID; GIDIndex(i) names entry i and overrides the choice.
//
// Every layer that needs a local GID takes a GIDSelector (rc.Config.GID,
// ud.Config.GID, dc.DCIConfig.GID, dc.DCTConfig.GID, channel.Options.GID,
// ibpath.Local), so leaving it unset picks the same entry everywhere.
type GIDSelector struct {
	index    uint8
	explicit bool
}

// GIDIndex returns the GIDSelector that names entry i of the GID table.
func GIDIndex(i uint8) GIDSelector { return GIDSelector{index: i, explicit: true} }

// Index returns the entry named by GIDIndex; ok is false for the zero
// value, which chooses.
func (s GIDSelector) Index() (i uint8, ok bool) { return s.index, s.explicit }

// Auto reports whether s is the zero value: ChooseGID picks the entry.
func (s GIDSelector) Auto() bool { return !s.explicit }

// String returns "auto" or the index.
func (s GIDSelector) String() string {
	if !s.explicit {
		return "auto"
	}
	return strconv.Itoa(int(s.index))
}

// ChooseGID returns the GID table entry of port (0 means 1) that sel
// selects: the entry GIDIndex names, or, for the zero GIDSelector, the one
// ChooseGID picks from the port's attributes and table (see the function
// ChooseGID). The error wraps ErrNotFound when there is no such entry and
// ErrPortNotActive when an Ethernet port to choose on is not ACTIVE.
func (c *Context) ChooseGID(port uint8, sel GIDSelector) (GIDEntry, error) {
	if port == 0 {
		port = 1
	}
	pa, err := c.QueryPort(port)
	if err != nil {
		return GIDEntry{}, err
	}
	gids, err := c.QueryGIDs(port)
	if err != nil {
		return GIDEntry{}, err
	}
	e, err := ChooseGID(pa, gids, sel)
	if err != nil {
		return GIDEntry{}, &OpError{Op: "choose GID", Err: fmt.Errorf("%s port %d: %w", c.DeviceName(), port, err)}
	}
	c.logGID(port, sel, e)
	return e, nil
}

// ChooseGID returns the entry of gids (the GID table of the port pa
// describes) that sel selects.
//
// An explicit index (GIDIndex) selects that entry, whatever its type and
// whatever the port's state; ErrNotFound when the table has none there.
//
// The zero GIDSelector chooses. On InfiniBand, where queue pairs are
// addressed by LID and a GID is used only with a GRH, it is the entry of
// the lowest index (index 0, the port GID built from the subnet prefix and
// the port GUID). On Ethernet (RoCE) the port must be ACTIVE (else
// ErrPortNotActive: a port that is down carries nothing, and its table,
// which follows the addresses of its network device, may not be complete),
// and the entry is, in this order of preference, ties going to the lower
// index:
//
//  1. RoCE v2, IPv4-mapped (::ffff:a.b.c.d), not 169.254.0.0/16
//  2. RoCE v2, IPv4-mapped, link-local 169.254.0.0/16
//  3. RoCE v2, IPv6 other than link-local (global, unique local)
//  4. RoCE v2, IPv6 link-local (fe80::/10)
//  5. RoCE v1 in the same order of addresses, then entries of unknown type
//
// RoCE v2 comes first because it is UDP/IP, which a routed network
// forwards; RoCE v1 (a GRH straight over Ethernet) stays within one L2
// domain, and a link-local address is not routed either. Index 0 of an
// Ethernet port is usually the RoCE v1 link-local GID: the last choice.
// Entries that are all zeros are skipped; ErrNotFound when nothing is left.
func ChooseGID(pa PortAttr, gids []GIDEntry, sel GIDSelector) (GIDEntry, error) {
	if i, ok := sel.Index(); ok {
		for _, e := range gids {
			if e.Index == int(i) {
				return e, nil
			}
		}
		return GIDEntry{}, fmt.Errorf("no GID at index %d: %w", i, ErrNotFound)
	}
	if pa.LinkLayer != LinkLayerEthernet {
		best := -1
		for k, e := range gids {
			if best < 0 || e.Index < gids[best].Index {
				best = k
			}
		}
		if best < 0 {
			return GIDEntry{}, fmt.Errorf("empty GID table: %w", ErrNotFound)
		}
		return gids[best], nil
	}
	if pa.State != PortStateActive && pa.State != PortStateActiveDefer {
		return GIDEntry{}, fmt.Errorf("RoCE port is %v, not ACTIVE: no GID to choose: %w", pa.State, ErrPortNotActive)
	}
	best, bestRank := -1, 0
	for k, e := range gids {
		r := roceGIDRank(e)
		if r < 0 {
			continue
		}
		if best < 0 || r < bestRank || r == bestRank && e.Index < gids[best].Index {
			best, bestRank = k, r
		}
	}
	if best < 0 {
		return GIDEntry{}, fmt.Errorf("RoCE port has no usable GID (%d entries): %w", len(gids), ErrNotFound)
	}
	return gids[best], nil
}

// roceGIDRank ranks a GID table entry of an Ethernet port for ChooseGID:
// lower is better, -1 is unusable.
func roceGIDRank(e GIDEntry) int {
	if e.GID.IsZero() {
		return -1
	}
	r := 0
	switch e.Type {
	case GIDTypeRoCEv2:
	case GIDTypeRoCEv1:
		r = 4
	default:
		r = 8
	}
	a := netip.AddrFrom16(e.GID)
	switch {
	case a.Is4In6() && !a.Unmap().IsLinkLocalUnicast():
	case a.Is4In6():
		r++
	case !a.IsLinkLocalUnicast():
		r += 2
	default:
		r += 3
	}
	return r
}
