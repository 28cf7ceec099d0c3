package sim

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// hostilePair joins two raw members of one shared fabric: a victim and a
// hostile peer that writes what it likes in the files it maps.
func hostilePair(t *testing.T) (victim, hostile *shmFabric) {
	t.Helper()
	name := testFabricName(t)
	victim, err := joinShared(name, ctx.LinkLayerInfiniBand, 0)
	require.NoError(t, err)
	t.Cleanup(victim.leave)
	hostile, err = joinShared(name, ctx.LinkLayerInfiniBand, 0)
	require.NoError(t, err)
	t.Cleanup(hostile.leave)
	return victim, hostile
}

// hostileProducer is hostilePair with the victim's inbound file as the
// hostile member maps it, its ring there (slot hs) announced.
func hostileProducer(t *testing.T) (victim *shmFabric, p *ringFile, hs int) {
	t.Helper()
	victim, hostile := hostilePair(t)
	p = hostile.peer(victim.slot)
	require.NotNil(t, p)
	p.announce(hostile.slot)
	return victim, p, hostile.slot
}

// guardedRegion registers a page of memory with a guard page after it
// on e's PD, with every access.
func guardedRegion(t *testing.T, e *env) ([]byte, *ctx.MemoryRegion) {
	t.Helper()
	buf, err := ctx.AllocBuffer(4096, ctx.BufferOptions{Guard: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = buf.Close() })
	mr, err := e.pd.RegisterMemory(buf.Bytes(), allAccess)
	require.NoError(t, err)
	return buf.Bytes(), mr
}

// joinHostile joins a raw member to e's shared fabric and returns it and
// e's inbound file as the member maps it, its ring there announced.
func joinHostile(t *testing.T, e *env) (*shmFabric, *ringFile) {
	t.Helper()
	name, vs := e.f.SharedFabric()
	hostile, err := joinShared(name, ctx.LinkLayerInfiniBand, 0)
	require.NoError(t, err)
	t.Cleanup(hostile.leave)
	p := hostile.peer(vs)
	require.NotNil(t, p)
	p.announce(hostile.slot)
	return hostile, p
}

func noPanic(t *testing.T, what string, fn func()) {
	t.Helper()
	var r any
	func() {
		defer func() { r = recover() }()
		fn()
	}()
	require.Nil(t, r, "%s: the victim panicked: %v", what, r)
}

// TestSharedHostileUnalignedTailConsumer: a hostile producer stores an
// unaligned tail in its ring of the victim's file and publishes a malformed
// record, then a mark at the head the victim moved to: the victim's
// consumer keeps its positions aligned and never reads past the ring.
func TestSharedHostileUnalignedTailConsumer(t *testing.T) {
	victim, p, hs := hostileProducer(t) // p: the victim's inbound file, as the hostile maps it
	data := p.data(hs)
	(*wireHdr)(unsafe.Pointer(&data[ringMarkSize])).Len = 8 // no producer writes this
	atomic.StoreUint64(p.tail(hs), ringDataSize-4)
	atomic.StoreUint64(p.mark(hs, 0), 1)
	f := New(Options{})
	defer f.Close()
	noPanic(t, "malformed record", func() { victim.drain(f) })
	head := atomic.LoadUint64(victim.in.head(hs))
	atomic.StoreUint64(p.mark(hs, head), head+1) // a mark where the victim looks
	noPanic(t, "record at an unaligned head", func() { victim.drain(f) })
}

// TestSharedHostileUnalignedTailProducer: a hostile consumer stores an
// unaligned tail (and head) for the ring the victim writes in the
// hostile's file: the victim's producer aligns it, and writes neither past
// the ring's end nor into the next ring.
func TestSharedHostileUnalignedTailProducer(t *testing.T) {
	for _, pos := range []uint64{ringDataSize - 4, ringDataSize - 9} {
		t.Run(fmt.Sprint(ringDataSize-pos), func(t *testing.T) {
			victim, hostile := hostilePair(t)
			vs, in := victim.slot, hostile.in
			atomic.StoreUint64(in.tail(vs), pos)
			atomic.StoreUint64(in.head(vs), pos)
			next := in.data(vs + 1)[:16] // the ring after the victim's
			for i := range next {
				next[i] = 0xff
			}
			noPanic(t, "send", func() {
				victim.send(hostile.slot, 0, func(h *wireHdr, _ []byte) { h.Kind = wireResponse })
			})
			require.Equal(t, bytes.Repeat([]byte{0xff}, 16), next, "the victim wrote outside its ring")
		})
	}
}

// TestSharedHostileHeaderChangedWhileServed: a hostile requester flips a
// WRITE's remote address in its published record, between one inside the
// rkey's region and one outside, while the victim serves it: the victim
// checks and writes with one copy of the header, and nothing outside the
// region changes.
func TestSharedHostileHeaderChangedWhileServed(t *testing.T) {
	skipOnEmulatedCPU(t)
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two CPUs")
	}
	name := testFabricName(t)
	e := newEnv(t, Options{Mode: Engine, Fabric: name})
	e.allowViolations = true
	srq := e.newSRQ(e.pd, 16, 1)
	const key = 0xfeed
	dct := e.dct(e.pd, srq, key)
	buf, err := ctx.AllocBuffer(8192, ctx.BufferOptions{Guard: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = buf.Close() })
	mem := buf.Bytes()
	mr, err := e.pd.RegisterMemory(mem[:4096], allAccess)
	require.NoError(t, err)
	good, bad := uint64(mr.Addr()), uint64(mr.Addr())+4096 // bad: outside the region

	hostile, p := joinHostile(t, e)
	hs := hostile.slot
	src, _ := slotQPNRange(hs)
	lid := lidOf(t, e.c)

	var target atomic.Pointer[uint64]
	stop, stopped := make(chan struct{}), make(chan struct{})
	defer func() { close(stop); <-stopped }() // before the hostile unmaps the ring
	go func() {
		defer close(stopped)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for i := 0; i < 1000; i++ {
				if a := target.Load(); a != nil {
					atomic.StoreUint64(a, bad)
					atomic.StoreUint64(a, good)
				}
			}
		}
	}()
	outside := func() bool { return !bytes.Equal(mem[4096:], make([]byte, 4096)) }
	// Without the copy the victim wrote outside within 0.6 s of this,
	// six times out of six.
	hunt := 3 * time.Second
	if testing.Short() {
		hunt = time.Second
	}
	deadline := time.Now().Add(hunt)
	for i := 0; time.Now().Before(deadline) && !outside(); i++ {
		rec, at, err := p.reserve(hs, ringRecHdr+64)
		require.NoError(t, err)
		h := (*wireHdr)(unsafe.Pointer(&rec[ringMarkSize]))
		*h = wireHdr{Len: uint32(len(rec)), Kind: wireRequest, Op: uint8(prm.OpRdmaWrite), SrcGen: hostile.gen, DstGen: p.gen,
			DstQPN: dct.qp.QPN(), SrcQPN: src, Epoch: uint32(i + 1), Flags: wireFirst, DCKey: key,
			RAddr: good, RKey: mr.RKey(), Total: 64, Seg: 64, DLID: lid}
		for j := range rec[ringRecHdr:] {
			rec[ringRecHdr+j] = 0xab
		}
		target.Store(&h.RAddr)
		p.commit(hs, at, len(rec))
		taken := time.Now().Add(10 * time.Second)
		for atomic.LoadUint64(p.head(hs)) < at+uint64(len(rec)) {
			require.True(t, time.Now().Before(taken), "the victim took no record")
			time.Sleep(10 * time.Microsecond)
		}
		target.Store(nil)
	}
	require.False(t, outside(), "the victim wrote outside the rkey's region")
}

// TestSharedStaleFabricOtherLinkLayer: a fabric left on InfiniBand by a
// process that crashed (its slot still held, by a pid that is gone) does
// not refuse the next run on Ethernet: no live process uses it.
func TestSharedStaleFabricOtherLinkLayer(t *testing.T) {
	name := testFabricName(t)
	r, err := openRegistry(name, ctx.LinkLayerInfiniBand)
	require.NoError(t, err)
	slot, gen, err := r.claim(name, 0)
	require.NoError(t, err)
	*r.u64(slotOff(slot) + slotStart) += 12345 // a process that is gone
	r.publish(slot, gen)
	r.unlock()
	r.close()

	f := New(Options{Mode: Engine, Fabric: name, LinkLayer: ctx.LinkLayerEthernet})
	defer f.Close()
	c, err := f.Open("sim0")
	require.NoError(t, err, "a fabric no live process uses blocks the next run")
	defer c.Close()
}

// hostileMalformed publishes, at the head of the hostile's ring in the
// victim's file, a record of a length no producer writes, leaving its own
// tail where it was (at the record).
func hostileMalformed(t *testing.T, p *ringFile, hs int) {
	head := atomic.LoadUint64(p.head(hs))
	pos := head & (ringDataSize - 1)
	p.announce(hs)
	(*wireHdr)(unsafe.Pointer(&p.data(hs)[pos+ringMarkSize])).Len = 8
	atomic.StoreUint64(p.tail(hs), head)
	atomic.StoreUint64(p.mark(hs, head), head+1)
}

// TestSharedHostileMalformedRecordStays: a malformed record whose
// producer's tail has not moved past it is stepped over, not found again
// by every drain (which would keep the engine from sleeping).
func TestSharedHostileMalformedRecordStays(t *testing.T) {
	victim, hostile := hostilePair(t)
	p := hostile.peer(victim.slot)
	require.NotNil(t, p)
	hostileMalformed(t, p, hostile.slot)
	f := New(Options{})
	defer f.Close()
	victim.drain(f)
	require.False(t, victim.in.pending(victim.slot), "the malformed record is still pending after the drain")
}

// TestSharedHostileMalformedRecordSpins: an engine with that record at a
// ring's head sleeps when idle rather than spin a core.
func TestSharedHostileMalformedRecordSpins(t *testing.T) {
	skipOnEmulatedCPU(t)
	name := testFabricName(t)
	e := newEnv(t, Options{Mode: Engine, Fabric: name})
	hostile, err := joinShared(name, ctx.LinkLayerInfiniBand, 0)
	require.NoError(t, err)
	t.Cleanup(hostile.leave)
	_, vs := e.f.SharedFabric()
	p := hostile.peer(vs)
	require.NotNil(t, p)
	hostileMalformed(t, p, hostile.slot)
	time.Sleep(200 * time.Millisecond) // past the engine's spin after work
	cpu := func() time.Duration {
		var ru unix.Rusage
		require.NoError(t, unix.Getrusage(unix.RUSAGE_SELF, &ru))
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	c0, t0 := cpu(), time.Now()
	time.Sleep(500 * time.Millisecond)
	share := float64(cpu()-c0) / float64(time.Since(t0))
	t.Logf("an idle engine with a malformed record at a ring's head: %.1f%% of a core", 100*share)
	require.Less(t, share, 0.25, "the engine spins")
}

// TestSharedHostileNAKSyndrome: the peer an RC QP sends to answers its
// request with a NAK carrying a syndrome no responder sends (a local one,
// WR_FLUSH_ERR, 0): the WQE completes with a remote syndrome or a bad
// response, never with a status of the requester's own side.
func TestSharedHostileNAKSyndrome(t *testing.T) {
	skipOnEmulatedCPU(t)
	for _, synd := range []prm.Syndrome{prm.SyndromeWRFlush, prm.SyndromeLocalProt, 0} {
		t.Run(synd.String(), func(t *testing.T) {
			name := testFabricName(t)
			e := newEnv(t, Options{Mode: Engine, Fabric: name})
			hostile, err := joinShared(name, ctx.LinkLayerInfiniBand, 0)
			require.NoError(t, err)
			t.Cleanup(hostile.leave)
			_, vs := e.f.SharedFabric()
			hq, _ := slotQPNRange(hostile.slot)
			a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
			require.NoError(t, a.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: allAccess}))
			require.NoError(t, a.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: hq, PathMTU: ctx.MTU4096, Path: ctx.AddressAttr{DLID: 1}}))
			require.NoError(t, a.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 14, RetryCount: 7, RNRRetry: 7, MaxRdAtomic: 16}))
			a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(0x1000, 1), inlineSeg([]byte("data")))
			in := hostile.in
			deadline := time.Now().Add(5 * time.Second)
			for atomic.LoadUint64(in.mark(vs, 0)) != 1 {
				require.True(t, time.Now().Before(deadline), "no request came")
				time.Sleep(time.Millisecond)
			}
			var req wireHdr
			walkRing(in, vs, func(h *wireHdr, _ []byte) { req = *h })
			require.True(t, hostile.send(vs, 0, func(h *wireHdr, _ []byte) {
				h.Kind, h.Op, h.Status, h.Synd = wireResponse, req.Op, wireNAK, uint8(synd)
				h.DstQPN, h.SrcQPN, h.PSN = req.SrcQPN, hq, req.PSN
			}))
			x := waitCQE(t, a.scq, 5*time.Second)
			require.Contains(t, []prm.Syndrome{prm.SyndromeRemoteInvalReq, prm.SyndromeRemoteAccess, prm.SyndromeRemoteOp, prm.SyndromeBadResp}, x.synd,
				"a NAK completed the WQE with %v", x.synd)
		})
	}
}

// TestSharedStaleRegistryOtherLayout: a registry left by a build of
// another layout (32 slots, so another size) that no process uses any more
// is started afresh: its header and slot records keep their offsets in
// every version, and say that no process uses it.
func TestSharedStaleRegistryOtherLayout(t *testing.T) {
	name := testFabricName(t)
	const slots = 32
	b := make([]byte, regHeaderSize+slots*regSlotSize)
	binary.NativeEndian.PutUint64(b[regMagic:], shmMagic)
	binary.NativeEndian.PutUint32(b[regVersion:], shmVersion-1)
	binary.NativeEndian.PutUint32(b[regSlots:], slots)
	binary.NativeEndian.PutUint32(b[regRingSize:], ringDataSize)
	// Slot 0 held by a process that is gone.
	binary.NativeEndian.PutUint32(b[slotOff(0)+slotPID:], uint32(os.Getpid()))
	binary.NativeEndian.PutUint64(b[slotOff(0)+slotStart:], 12345)
	binary.NativeEndian.PutUint64(b[slotOff(0)+slotGen:], 7)
	require.NoError(t, os.WriteFile(registryPath(name), b, 0o600))
	f := New(Options{Mode: Engine, Fabric: name})
	defer f.Close()
	c, err := f.Open("sim0")
	require.NoError(t, err, "a registry no live process uses blocks the next run")
	defer c.Close()
}

// TestSharedLiveRegistryOtherLayout: a registry of another layout (32
// slots, so another size) that a live process still uses is refused with
// ErrFabricVersion, and the error says, as for another version of this
// layout, which version the registry speaks and which process uses it.
func TestSharedLiveRegistryOtherLayout(t *testing.T) {
	name := testFabricName(t)
	const slots = 32
	b := make([]byte, regHeaderSize+slots*regSlotSize)
	binary.NativeEndian.PutUint64(b[regMagic:], shmMagic)
	binary.NativeEndian.PutUint32(b[regVersion:], shmVersion-1)
	binary.NativeEndian.PutUint32(b[regSlots:], slots)
	binary.NativeEndian.PutUint32(b[regRingSize:], ringDataSize)
	// Slot 3 held by a live process: this one.
	start, err := selfStart()
	require.NoError(t, err)
	binary.NativeEndian.PutUint32(b[slotOff(3)+slotPID:], uint32(os.Getpid()))
	binary.NativeEndian.PutUint64(b[slotOff(3)+slotStart:], start)
	binary.NativeEndian.PutUint64(b[slotOff(3)+slotGen:], 7)
	require.NoError(t, os.WriteFile(registryPath(name), b, 0o600))
	f := New(Options{Mode: Engine, Fabric: name})
	defer f.Close()
	_, err = f.Open("sim0")
	require.ErrorIs(t, err, ErrFabricVersion)
	require.ErrorContains(t, err, fmt.Sprintf("speaks protocol version %d", shmVersion-1))
	require.ErrorContains(t, err, fmt.Sprintf("process %d still uses it", os.Getpid()))
	got, err := os.ReadFile(registryPath(name))
	require.NoError(t, err)
	require.Equal(t, b, got, "a registry a live process uses is left alone")
}

// TestSharedLeaveKeepsNextOwnersRing: a process that leaves removes its
// ring file only while its slot is still its own: the file of a process
// that claimed the slot since (here, as if between the slot's release and
// the removal) stays, and its peers can still reach it.
func TestSharedLeaveKeepsNextOwnersRing(t *testing.T) {
	name := testFabricName(t)
	a, err := joinShared(name, ctx.LinkLayerInfiniBand, 0)
	require.NoError(t, err)
	// a's slot is freed as release would free it, and claimed again.
	atomic.StoreUint64(a.reg.u64(slotOff(a.slot)+slotGen), 0)
	b, err := joinShared(name, ctx.LinkLayerInfiniBand, 0)
	require.NoError(t, err)
	t.Cleanup(b.leave)
	require.Equal(t, a.slot, b.slot, "the next process takes the free slot")
	a.leave()
	_, err = os.Stat(ringPath(name, b.slot))
	require.NoError(t, err, "the slot's new owner lost its ring file")
}

// TestSharedDrainBounded: a producer that publishes a large record (here,
// pads) at every position as soon as the consumer gives it back cannot
// keep a drain going for ever: a drain takes at most a ring's worth, and
// the rest waits for the next round.
func TestSharedDrainBounded(t *testing.T) {
	victim, p, hs := hostileProducer(t)
	const rec = ringGiveBack
	data := p.data(hs)
	for pos := 0; pos < ringDataSize; pos += rec {
		h := (*wireHdr)(unsafe.Pointer(&data[pos+ringMarkSize]))
		h.Len, h.Kind = rec, wirePad
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		next := uint64(0)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for head := atomic.LoadUint64(p.head(hs)); next < head+ringDataSize/2; next += rec {
				atomic.StoreUint64(p.mark(hs, next), next+1)
			}
		}
	}()
	for atomic.LoadUint64(p.mark(hs, ringDataSize/2-rec)) != ringDataSize/2-rec+1 {
		runtime.Gosched() // half a ring published before the drain starts
	}
	f := New(Options{})
	defer f.Close()
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		victim.drain(f)
	}()
	select {
	case <-drained:
	case <-time.After(20 * time.Second):
		t.Fatal("a drain did not return")
	}
	close(stop)
	<-stopped
	require.LessOrEqual(t, atomic.LoadUint64(victim.in.head(hs)), uint64(ringDataSize), "a drain took more than a ring's worth")
}

// TestSharedHostileSpeaksForAnotherSlot: a member of the fabric that
// writes a request in the name of a QPN of another slot (here the
// victim's own range, and a third slot's) gets nothing: the victim drops
// it, as the TCP link's listener drops such a message; the same request
// in the member's own QPN is served. Before, the victim served it, so a
// process could write through another's RC connection or DC stream, and
// a DCT kept a stream for every QPN of the space.
func TestSharedHostileSpeaksForAnotherSlot(t *testing.T) {
	skipOnEmulatedCPU(t)
	name := testFabricName(t)
	e := newEnv(t, Options{Mode: Engine, Fabric: name})
	srq := e.newSRQ(e.pd, 16, 1)
	const key = 0xfeed
	dct := e.dct(e.pd, srq, key)
	mem, mr := guardedRegion(t, e)

	hostile, p := joinHostile(t, e)
	hs := hostile.slot
	lid := lidOf(t, e.c)
	write := func(src uint32, epoch uint32, fill byte) {
		t.Helper()
		rec, at, err := p.reserve(hs, ringRecHdr+64)
		require.NoError(t, err)
		h := (*wireHdr)(unsafe.Pointer(&rec[ringMarkSize]))
		*h = wireHdr{Len: uint32(len(rec)), Kind: wireRequest, Op: uint8(prm.OpRdmaWrite), SrcGen: hostile.gen, DstGen: p.gen,
			DstQPN: dct.qp.QPN(), SrcQPN: src, Epoch: epoch, Flags: wireFirst, DCKey: key,
			RAddr: uint64(mr.Addr()), RKey: mr.RKey(), Total: 64, Seg: 64, DLID: lid}
		for j := range rec[ringRecHdr:] {
			rec[ringRecHdr+j] = fill
		}
		p.commit(hs, at, len(rec))
		taken := time.Now().Add(10 * time.Second)
		for atomic.LoadUint64(p.head(hs)) < at+uint64(len(rec)) {
			require.True(t, time.Now().Before(taken), "the victim took no record")
			time.Sleep(10 * time.Microsecond)
		}
	}
	_, vs := e.f.SharedFabric()
	victimQPN, _ := slotQPNRange(vs)
	third, _ := slotQPNRange((max(vs, hs) + 1) % shmMaxSlots)
	for i, src := range []uint32{victimQPN, third} {
		write(src, uint32(i+1), 0xab) // served, if at all, before the victim moves its head past it
		require.Equal(t, make([]byte, 64), mem[:64], "a request in the name of QPN %#x of another slot was served", src)
	}
	own, _ := slotQPNRange(hs)
	write(own, 3, 0xcd)
	require.Eventually(t, func() bool { return bytes.Equal(mem[:64], bytes.Repeat([]byte{0xcd}, 64)) }, 10*time.Second, time.Millisecond,
		"the same request in the member's own QPN is served")
}

// TestSharedRegistryOthersMayWriteRefused: a registry file that other
// users may read or write (one another user made in the shared /dev/shm
// for this fabric's name, say) is refused with permission denied, naming
// the file and its mode, and left as it was; so is a peer's ring file
// others may write. A file of another user is refused alike
// (privateFile).
func TestSharedRegistryOthersMayWriteRefused(t *testing.T) {
	name := testFabricName(t)
	p := registryPath(name)
	require.NoError(t, os.WriteFile(p, nil, 0o600))
	require.NoError(t, os.Chmod(p, 0o666))
	// Its owner holds its lock: refused all the same, not waited for.
	held, err := os.Open(p)
	require.NoError(t, err)
	defer held.Close()
	require.NoError(t, unix.Flock(int(held.Fd()), unix.LOCK_EX))
	f := New(Options{Mode: Engine, Fabric: name})
	defer f.Close()
	_, err = f.Open("sim0")
	require.ErrorIs(t, err, os.ErrPermission)
	require.ErrorContains(t, err, p)
	require.ErrorContains(t, err, "mode 0666")
	fi, err := os.Stat(p)
	require.NoError(t, err)
	require.Zero(t, fi.Size(), "the file is left as it was")

	require.NoError(t, unix.Flock(int(held.Fd()), unix.LOCK_UN))
	require.NoError(t, os.Chmod(p, 0o600))
	a, err := joinShared(name, ctx.LinkLayerInfiniBand, 0)
	require.NoError(t, err, "the same file, private")
	defer a.leave()
	ring := ringPath(name, a.slot)
	require.NoError(t, os.Chmod(ring, 0o622))
	_, err = openRingFile(name, a.slot, a.gen)
	require.ErrorIs(t, err, os.ErrPermission)
	require.NoError(t, os.Chmod(ring, 0o600))
	rf, err := openRingFile(name, a.slot, a.gen)
	require.NoError(t, err)
	rf.close()

	var st unix.Stat_t
	require.NoError(t, unix.Stat(p, &st))
	require.NoError(t, privateFile(p, &st))
	st.Uid++
	require.ErrorIs(t, privateFile(p, &st), os.ErrPermission, "another user's file")
}

// TestSharedDrainBoundedSmallRecords: a producer that publishes small
// records ahead of the head it was given back (two laps of 128-byte pads,
// laid out so that their marks never share a position) still gives a
// drain at most a ring's worth. Before, the bound was looked at only
// after a record of ringGiveBack bytes or more: this drain took two laps,
// and a producer that kept writing a lap ahead held it (and the Fabric's
// lock) for as long as it liked.
func TestSharedDrainBoundedSmallRecords(t *testing.T) {
	victim, p, hs := hostileProducer(t)
	data := p.data(hs)
	const rec, start = 128, 64
	pad := func(pos, n uint64) {
		h := (*wireHdr)(unsafe.Pointer(&data[pos%ringDataSize+ringMarkSize]))
		h.Len, h.Kind = uint32(n), wirePad
		atomic.StoreUint64(p.mark(hs, pos), pos+1)
	}
	// Lap 0 from 64 in 128-byte pads (its last 64 bytes), lap 1 from 0.
	for pos := uint64(start); pos < ringDataSize-rec/2; pos += rec {
		pad(pos, rec)
	}
	pad(ringDataSize-rec/2, rec/2)
	for pos := uint64(ringDataSize); pos < 2*ringDataSize; pos += rec {
		pad(pos, rec)
	}
	atomic.StoreUint64(victim.in.head(hs), start)
	f := New(Options{})
	defer f.Close()
	read, _ := victim.drainRing(f, hs, false)
	require.True(t, read)
	took := atomic.LoadUint64(victim.in.head(hs)) - start
	require.GreaterOrEqual(t, took, uint64(ringDataSize), "a drain stopped short of a ring's worth")
	require.LessOrEqual(t, took, uint64(ringDataSize+rec), "a drain took more than a ring's worth and a record")
}

// TestSharedHostileWritesAnotherSlotsRing: a member that writes a request
// into a ring of the victim's file that is not its own gets nothing where
// the victim can tell: in the ring of the victim's own slot (no member
// sends there: a message to a QP of one's own executes in the process),
// nor in the ring of a slot never owned (no generation to match, and 0
// is none). A member that writes in the ring of another live member, with
// that member's QPN and generation (public in the registry), is not told
// apart: members of a fabric trust each other that far (docs/hardware.md,
// "Peers that misbehave").
func TestSharedHostileWritesAnotherSlotsRing(t *testing.T) {
	name := testFabricName(t)
	e := newEnv(t, Options{Mode: Engine, Fabric: name})
	mem, mr := guardedRegion(t, e)
	lid := lidOf(t, e.c)
	_, vs := e.f.SharedFabric()
	hostile, p := joinHostile(t, e)
	hs := hostile.slot
	unused := (max(vs, hs) + 1) % shmMaxSlots

	rc := func(remote uint32) *testQP {
		q := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
		require.NoError(t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: allAccess}))
		require.NoError(t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: remote, PathMTU: ctx.MTU4096, Path: ctx.AddressAttr{DLID: lid}}))
		return q
	}
	local := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
	toLocal := rc(local.qp.QPN()) // connected to a QP of the victim's own
	unusedQPN, _ := slotQPNRange(unused)
	toUnused := rc(unusedQPN)
	ownQPN, _ := slotQPNRange(hs)
	toHostile := rc(ownQPN)

	write := func(ring int, gen uint64, src, dst, psn uint32, off uint64, fill byte) uint64 {
		t.Helper()
		rec, at, err := p.reserve(ring, ringRecHdr+64)
		require.NoError(t, err)
		h := (*wireHdr)(unsafe.Pointer(&rec[ringMarkSize]))
		*h = wireHdr{Len: uint32(len(rec)), Kind: wireRequest, Op: uint8(prm.OpRdmaWrite),
			SrcGen: gen, DstGen: p.gen, DstQPN: dst, SrcQPN: src, PSN: psn,
			RAddr: uint64(mr.Addr()) + off, RKey: mr.RKey(), Total: 64, Seg: 64, DLID: lid}
		for j := range rec[ringRecHdr:] {
			rec[ringRecHdr+j] = fill
		}
		atomic.OrUint64(p.u64(ringFileSenders), 1<<ring)
		p.commit(ring, at, len(rec))
		return at + uint64(len(rec))
	}
	write(vs, e.f.shm.gen, local.qp.QPN(), toLocal.qp.QPN(), 0, 0, 0xab)
	end := write(unused, 0, unusedQPN, toUnused.qp.QPN(), 0, 64, 0xab)
	require.Eventually(t, func() bool { return atomic.LoadUint64(p.head(unused)) >= end }, 10*time.Second, 10*time.Microsecond,
		"the victim took no record from the unused slot's ring")
	// Two requests of the member's own, served one after the other: the
	// victim's rounds meanwhile read every ring announced.
	for i, fill := range []byte{0xcd, 0xce} {
		write(hs, hostile.gen, ownQPN, toHostile.qp.QPN(), uint32(i), 128, fill)
		require.Eventually(t, func() bool { return bytes.Equal(mem[128:192], bytes.Repeat([]byte{fill}, 64)) }, 10*time.Second, time.Millisecond,
			"the member's own request %d was not served", i)
	}
	require.Equal(t, make([]byte, 64), mem[:64], "a request in the ring of the victim's own slot was served")
	require.Equal(t, make([]byte, 64), mem[64:128], "a request in the ring of a slot never owned was served")
}

// TestSharedHostileTailPadAllocated: a consumer that moves the tail of a
// producer's ring (it lies in the consumer's file) near the ring's end
// makes the producer's next record go to the front behind a pad: the
// pad's line, far past what the producer allocated, is allocated before
// it is written, so that a full file system fails the record (ENOSPC)
// instead of killing the producer with SIGBUS.
func TestSharedHostileTailPadAllocated(t *testing.T) {
	producer, consumer := hostilePair(t)
	p := producer.peer(consumer.slot)
	require.NotNil(t, p)
	from := producer.slot
	_, _, err := p.reserve(from, ringRecHdr)
	require.NoError(t, err)
	require.Less(t, p.allocated, uint64(ringDataSize/2))
	tail := uint64(ringDataSize - wireAlign)
	atomic.StoreUint64(p.tail(from), tail)
	atomic.StoreUint64(p.head(from), tail) // the consumer took everything
	_, at, err := p.reserve(from, 4*wireAlign)
	require.NoError(t, err)
	require.Equal(t, uint64(ringDataSize), at, "the record goes to the front, behind a pad")
	require.GreaterOrEqual(t, p.allocated, tail+wireAlign, "the pad's line was written unallocated")
}

// TestSharedOwnSlotMarkLetsEngineSleep: a mark that another member stores
// at the head of the ring of the victim's own slot (which no drain reads)
// does not keep the victim's engine from sleeping: before, the engine's
// look for pending records counted it, and an idle engine spun on a core
// (millions of empty sleeps a second instead of a few hundred).
func TestSharedOwnSlotMarkLetsEngineSleep(t *testing.T) {
	e := newEnv(t, Options{Mode: Engine, Fabric: testFabricName(t)})
	_, vs := e.f.SharedFabric()
	_, p := joinHostile(t, e)
	atomic.OrUint64(p.u64(ringFileSenders), 1<<vs)
	atomic.StoreUint64(p.mark(vs, 0), 1)
	time.Sleep(300 * time.Millisecond) // the engine is idle by now
	s0 := e.f.Stats().EngineSleeps
	time.Sleep(500 * time.Millisecond)
	sleeps := e.f.Stats().EngineSleeps - s0
	require.Less(t, sleeps, uint64(20000), "the engine does not sleep: %d sleeps in 500 ms", sleeps)
}

// TestSharedGenerationNeverZero: a member that sets the registry's next
// generation to its last value does not make the next joiner's slot look
// free (generation 0), which would give its slot and QPNs to a third.
func TestSharedGenerationNeverZero(t *testing.T) {
	victim, _ := hostilePair(t)
	atomic.StoreUint64(victim.reg.u64(regNextGen), ^uint64(0))
	joiner, err := joinShared(victim.name, ctx.LinkLayerInfiniBand, 0)
	require.NoError(t, err)
	t.Cleanup(joiner.leave)
	require.NotZero(t, joiner.gen)
	third, err := joinShared(victim.name, ctx.LinkLayerInfiniBand, 0)
	require.NoError(t, err)
	t.Cleanup(third.leave)
	require.NotEqual(t, joiner.slot, third.slot, "two live processes in one slot")
}

// TestSharedHostileRingPathFIFO: a member replaces its ring file with a
// FIFO: another member's look at whether it lives (ringHeld, under its
// Fabric's lock) returns at once rather than wait in open for a writer.
func TestSharedHostileRingPathFIFO(t *testing.T) {
	victim, hostile := hostilePair(t)
	p := ringPath(victim.name, hostile.slot)
	require.NoError(t, os.Remove(p))
	require.NoError(t, unix.Mkfifo(p, 0o600))
	done := make(chan bool, 1)
	go func() { done <- victim.peerAlive(hostile.slot) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		// Release the look: a writer ends its open.
		if fd, err := unix.Open(p, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			<-done
			_ = unix.Close(fd)
		}
		t.Fatal("the look at a member whose ring path is a FIFO waited for a writer")
	}
}
