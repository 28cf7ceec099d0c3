//go:build cgo && linux

package emulate

import (
	"strings"
	"unsafe"
)

// CallCount returns how many times the process's emulated kernel answered
// a command ("ioctl GET_CONTEXT", "write QUERY_DEVICE", "mmap UAR").
func CallCount(name string) int {
	if k := active(); k != nil {
		return k.callCount(name)
	}
	return 0
}

// MappingCount returns the number of UAR and clock info pages mapped in
// the process's emulated kernel.
func MappingCount() int {
	if k := active(); k != nil {
		return k.mappingCount()
	}
	return 0
}

// The environment's names and values, for the external tests.
const (
	EnvLink    = envLink
	EnvABI     = envABI
	ABIWrite   = abiWrite
	EnvPorts   = envPorts
	RoCENetdev = netdevRoCE
)

// TakeMemfdAsDMABuf makes REG_DMABUF_MR take a memfd named name as a
// dma-buf the CPU can map, until the returned function restores the
// check.
func TakeMemfdAsDMABuf(name string) (restore func()) {
	saved := isDMABufLink
	isDMABufLink = func(target string) bool {
		return saved(target) || strings.HasPrefix(target, "/memfd:"+name+" ")
	}
	return func() { isDMABufLink = saved }
}

// WatchedRegister returns the doorbell register the model watches for the
// QP numbered qpn in the process's emulated kernel, and the size of each
// of its two buffers; ok is false when it watches none.
func WatchedRegister(qpn uint32) (reg unsafe.Pointer, size uint32, ok bool) {
	k := active()
	if k == nil {
		return nil, 0, false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, f := range k.files {
		if f.uctx == nil {
			continue
		}
		for _, o := range f.uctx.objects {
			if o.kind == objQP && o.regMap != nil && o.qp.Descriptor().QPN == qpn {
				addr := o.regMap.addr + o.regOff
				return *(*unsafe.Pointer)(unsafe.Pointer(&addr)), o.regSize, true
			}
		}
	}
	return nil, 0, false
}

// SetPortSpeed makes the ports of the process's emulated devices answer
// QUERY_PORT with active speed speed (an IB_SPEED_* value), until the
// returned function restores theirs. The model and sysfs keep theirs.
func SetPortSpeed(speed uint32) (restore func()) {
	k := active()
	if k == nil {
		return func() {}
	}
	var saved []uint32
	for i := range k.devs {
		for j := range k.devs[i].Ports {
			saved = append(saved, k.devs[i].Ports[j].ActiveSpeed)
			k.devs[i].Ports[j].ActiveSpeed = speed
		}
	}
	return func() {
		n := 0
		for i := range k.devs {
			for j := range k.devs[i].Ports {
				k.devs[i].Ports[j].ActiveSpeed = saved[n]
				n++
			}
		}
	}
}
