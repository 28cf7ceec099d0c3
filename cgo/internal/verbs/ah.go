//go:build cgo && linux

package verbs

/*
#include "mlx5kit_verbs.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// AddressHandle is a struct ibv_ah whose address vector (struct
// mlx5_wqe_av, read with mlx5dv_init_obj) UD and DC send WQEs carry.
type AddressHandle struct {
	pd     *ProtectionDomain
	ah     *C.struct_ibv_ah
	av     [prm.AVSize]byte
	closed bool
}

// CreateAddressHandle resolves attr (ibv_create_ah; on RoCE this resolves
// the destination MAC) and copies the resulting address vector. On RoCE
// attr must have GlobalRoute set; a hop limit of 0 there becomes 64.
func (pd *ProtectionDomain) CreateAddressHandle(attr ctx.AddressAttr) (*AddressHandle, error) {
	const verb = "ibv_create_ah"
	if attr.Port == 0 {
		attr.Port = 1
	}
	detail := fmt.Sprintf("port %d DLID %#x", attr.Port, attr.DLID)
	if attr.GlobalRoute {
		detail = fmt.Sprintf("port %d DGID %v SGID index %d", attr.Port, attr.DGID, attr.SGIDIndex)
	}
	if err := pd.use(verb); err != nil {
		return nil, err
	}
	defer pd.d.mu.Unlock()
	pa, err := pd.d.queryPort(attr.Port)
	if err != nil {
		// No such port: mlx5_create_ah refuses it (without an errno of
		// its own; EINVAL is what the port query says).
		var ve *VerbError
		if errors.As(err, &ve) {
			return nil, &VerbError{Verb: verb, Detail: detail + ": no such port", Errno: ve.Errno, Sentinel: ve.Sentinel}
		}
		return nil, err
	}
	var a C.struct_ibv_ah_attr
	if err := fillAH(&a, attr, linkLayer(pa.link_layer)); err != nil {
		// What mlx5_create_ah refuses with EINVAL.
		return nil, &VerbError{Verb: verb, Detail: detail + ": " + err.Error(), Errno: syscall.EINVAL, Sentinel: ctx.ErrInvalidArgument}
	}
	ah, errno := C.ibv_create_ah(pd.pd, &a)
	if ah == nil {
		return nil, ptrError(verb, detail, errno)
	}
	h := &AddressHandle{pd: pd, ah: ah}
	if ret := C.mk_init_ah(ah, unsafe.Pointer(&h.av[0])); ret != 0 {
		C.ibv_destroy_ah(ah)
		return nil, retError("mlx5dv_init_obj", "AH "+detail, int(ret), nil)
	}
	pd.d.ahs[h] = struct{}{}
	return h, nil
}

// AV returns the 48-byte address vector. rdma-core leaves the key and the
// remote QPN / DCT number for the WQE builder, which fills them per send.
func (ah *AddressHandle) AV() [prm.AVSize]byte { return ah.av }

// Close destroys the handle (ibv_destroy_ah). It is idempotent.
func (ah *AddressHandle) Close() error {
	ah.pd.d.mu.Lock()
	defer ah.pd.d.mu.Unlock()
	return ah.closeLocked()
}

func (ah *AddressHandle) closeLocked() error {
	if ah.closed {
		return nil
	}
	if ret, errno := C.ibv_destroy_ah(ah.ah); ret != 0 {
		return retError("ibv_destroy_ah", "", int(ret), errno)
	}
	ah.closed = true
	delete(ah.pd.d.ahs, ah)
	return nil
}
