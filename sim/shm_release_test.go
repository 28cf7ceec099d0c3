package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// peerMapping returns e's mapping of the ring file of the process in slot
// (nil when it has none), read under the Fabric's lock.
func peerMapping(e *env, slot int) *ringFile {
	e.f.mu.Lock()
	defer e.f.mu.Unlock()
	return e.f.shm.peers[slot]
}

// closeEnv closes e's devices and its Fabric, which leaves the shared
// fabric (its cleanup closes them again, which does nothing).
func closeEnv(t *testing.T, e *env) {
	require.NoError(t, e.c.Close())
	require.NoError(t, e.c2.Close())
	require.NoError(t, e.f.Close())
}

// shmFreeBytes returns the free space of the file system of shmDir.
func shmFreeBytes(t *testing.T) int64 {
	var st unix.Statfs_t
	require.NoError(t, unix.Statfs(shmDir, &st))
	return int64(st.Bavail) * int64(st.Bsize)
}

// TestSharedLeftPeerRingUnmapped: a process that sent megabytes to a peer
// (its producer allocated that many pages of the peer's ring file) and
// then sends nothing more to that slot unmaps the peer's file, and closes
// its descriptor, soon after the peer leaves, without sending again: the
// file, unlinked by the peer, then gives its pages back to /dev/shm. A
// mapping kept until the next message to that slot would hold them for
// as long as the sender lives: up to 32 MiB per departed peer.
func TestSharedLeftPeerRingUnmapped(t *testing.T) {
	e1, e2 := sharedPair(t)
	a := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC, sendDepth: 64})
	q := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	connectRCTimed(t, a, q, 7, 14)
	_, s2 := e2.f.SharedFabric()

	// The peer drains nothing while the WRITEs leave: the ring fills
	// with them, and its pages are allocated.
	holdEngine(t, e2.f)
	const n = 12
	for i := 0; i < n; i++ {
		a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e2.addr(0), e2.mr.RKey()), dataSeg(1<<20, e1.mr.LKey(), e1.addr(0)))
	}
	// Until all of them are in the ring (a loaded machine takes a while
	// to copy 12 MiB): a peer released earlier drains the ring, and the
	// sender's next records go to its front again.
	var p *ringFile
	var held int64
	for t0 := time.Now(); held < n<<20; time.Sleep(time.Millisecond) {
		require.Less(t, time.Since(t0), 20*time.Second, "the sender allocated its records' pages in the peer's file (%d bytes)", held)
		if p = peerMapping(e1, s2); p == nil {
			continue
		}
		var st unix.Stat_t
		e1.f.mu.Lock()
		require.NoError(t, unix.Fstat(p.fd, &st))
		e1.f.mu.Unlock()
		held = st.Blocks * 512
	}
	e2.f.drivenAt.Store(0)
	for i := 0; i < n; i++ {
		require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, 20*time.Second).op)
	}
	require.True(t, peerMapping(e1, s2) == p, "the sender maps the peer's ring file")

	free := shmFreeBytes(t)
	closeEnv(t, e2)
	require.NoFileExists(t, ringPath(e2.f.opts.Fabric, s2))
	t0 := time.Now()
	for peerMapping(e1, s2) != nil {
		require.Less(t, time.Since(t0), 5*time.Second, "the departed peer's ring file is still mapped")
		time.Sleep(time.Millisecond)
	}
	e1.f.mu.Lock()
	fd, mem := p.fd, p.mem
	e1.f.mu.Unlock()
	require.Equal(t, -1, fd, "the descriptor of the departed peer's file is closed")
	require.True(t, mem == nil, "the departed peer's file is unmapped")
	// Other processes may use /dev/shm meanwhile: the space given back
	// is logged, not asserted.
	t.Logf("unmapped %v after the peer's Close returned; %d MiB of the peer's file held, /dev/shm free space %+d MiB since it left",
		time.Since(t0), held>>20, (shmFreeBytes(t)-free)>>20)
}

// TestSharedLeftPeerRingUnmappedInRounds: a Fabric whose rounds a polling
// loop runs (its engine never sleeps) unmaps a departed peer's ring file
// within shmGoneRounds rounds, and maps the file of the slot's next owner
// when it sends there.
func TestSharedLeftPeerRingUnmappedInRounds(t *testing.T) {
	e1, e2 := sharedPair(t)
	name, s2 := e2.f.SharedFabric()
	a := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC})
	q := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	connectRCTimed(t, a, q, 7, 14)
	a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e2.addr(0), e2.mr.RKey()), dataSeg(4096, e1.mr.LKey(), e1.addr(0)))
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, 5*time.Second).op)
	require.NotNil(t, peerMapping(e1, s2))

	holdEngine(t, e1.f)
	// Let go before the cleanups close e1's devices (they wait for its
	// engine), also when the test fails.
	t.Cleanup(func() { e1.f.drivenAt.Store(0) })
	closeEnv(t, e2)
	p := peerMapping(e1, s2)
	require.NotNil(t, p, "no round has run since the peer left")
	for i := 0; i < 2*shmGoneRounds; i++ {
		stepRound(e1.f)
	}
	// Not require.Nil, which would print the mapping's 2 GiB.
	require.True(t, peerMapping(e1, s2) == nil, "a departed peer's ring file is unmapped within shmGoneRounds rounds")
	require.Equal(t, -1, p.fd)

	// The slot's next owner is reached as before.
	e3 := newEnv(t, Options{Mode: Engine, Fabric: name})
	_, s3 := e3.f.SharedFabric()
	require.Equal(t, s2, s3, "the freed slot is taken again")
	e1.f.drivenAt.Store(0)
	b := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC})
	r := e3.newQP(e3.pd, qpOpts{typ: ctx.QPTypeRC})
	connectRCTimed(t, b, r, 7, 14)
	b.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e3.addr(0), e3.mr.RKey()), dataSeg(4096, e1.mr.LKey(), e1.addr(0)))
	require.Equal(t, prm.CQEReq, waitCQE(t, b.scq, 5*time.Second).op)
	p3 := peerMapping(e1, s3)
	require.NotNil(t, p3)
	require.True(t, p != p3, "a new mapping of the new owner's file")
}
