//go:build cgo && linux

package emulate

import (
	"cmp"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// FuzzObjectIoctl sends the object methods (every method the model
// answers, in key order) with the fuzzer's attributes over a context that
// holds a PD, an MR and a CQ, whose handles the attributes may name: the
// kernel must answer with one of its errnos, keep its event descriptors
// open, and leave no object whose parent is gone.
func FuzzObjectIoctl(f *testing.F) {
	f.Add(uint16(0), []byte{})
	f.Add(uint16(3), make([]byte, 4*attrSize))
	keys := make([]methodKey, 0, len(ioctlMethods))
	for key := range ioctlMethods {
		keys = append(keys, key)
	}
	slices.SortFunc(keys, func(x, y methodKey) int {
		return cmp.Or(cmp.Compare(x.object, y.object), cmp.Compare(x.method, y.method))
	})
	f.Fuzz(func(t *testing.T, which uint16, raw []byte) {
		k, a, fd := objectKernel(t)
		pd, _, en := allocPDCmd(k, a, fd)
		require.Zero(t, en)
		_, addr := a.alloc(4096)
		_, _, _, en = regMRCmd(k, a, fd, pd, uint64(addr), 64, uint64(addr), accessLocalWrite)
		require.Zero(t, en)
		ring, db := cqMemory(t, 64, 64)
		_, _, _, en = createCQCmd(k, a, fd, 63, 0, -1, mlx5CQReq(addrOf(ring), addrOf(db), 64), 8)
		require.Zero(t, en)

		key := keys[int(which)%len(keys)]
		nattrs := min(len(raw)/attrSize, 16)
		var attrs []testAttr
		for i := range nattrs {
			r := raw[i*attrSize:]
			id := ne.Uint16(r[attrOffID:])
			at := testAttr{id: id%10 | id&attrUHWIn, length: ne.Uint16(r[attrOffLen:]) % 80,
				flags: ne.Uint16(r[attrOffFlags:]) & attrFlagMandatory, attrData: ne.Uint16(r[attrOffAttrData:]) % 2,
				data: ne.Uint64(r[attrOffData:])}
			if at.data&1 == 0 {
				at.data = a.sanitize(at.data >> 1)
			} else {
				at.data = at.data >> 1 % 8 // a handle, a descriptor or a small value
			}
			attrs = append(attrs, at)
		}
		hdr, _ := a.ioctlCmd(key.object, key.method, attrs...)
		en = k.ioctl(fd, rdmaVerbsIoctl, hdr)
		require.True(t, allowedErrnos[en], "%s: errno %v", ioctlMethods[key].name, en)

		k.mu.Lock()
		defer k.mu.Unlock()
		for efd := range k.events {
			var st unix.Stat_t
			require.NoError(t, unix.Fstat(efd, &st), "event descriptor %d is open", efd)
		}
		uc := k.files[fd].uctx
		for h, o := range uc.objects {
			if o.kind == objMR {
				p, ok := uc.objects[o.owner]
				require.True(t, ok && p.kind == objPD, "MR %d without its PD %d", h, o.owner)
			}
		}
	})
}
