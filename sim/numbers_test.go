package sim

import (
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// requireExhausted checks the error of a create or register that found
// every number of its space live.
func requireExhausted(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, ctx.ErrNoMemory)
	require.ErrorIs(t, err, unix.ENOMEM)
	require.Contains(t, err.Error(), "are live")
}

func keyIndex(key uint32) uint32 { return key >> 8 }

// TestKeysNeverReissueALiveKey registers and deregisters a region many
// times at the end of the key index space, with other regions kept
// registered: no key issued equals a live one, the last indices are
// recycled, and the variant of a reused index changes every time.
func TestKeysNeverReissueALiveKey(t *testing.T) {
	e := newEnv(t, Options{})
	const left = 4
	leaveKeys(e.f, left)
	kept, err := e.pd2.RegisterMemory(e.mem2(0, 4096), allAccess)
	require.NoError(t, err)
	live := map[uint32]bool{e.mr.LKey(): true, e.mr2.LKey(): true, kept.LKey(): true}
	require.Len(t, live, 3)

	indices := map[uint32]bool{}
	last := map[uint32]uint32{} // index -> key it last carried
	const cycles = 3000         // each free index is reused about 1000 times: the variant wraps
	for i := 0; i < cycles; i++ {
		m, err := e.pd2.RegisterMemory(e.mem2(4096, 4096), allAccess)
		require.NoError(t, err, "cycle %d", i)
		k := m.LKey()
		require.Equal(t, k, m.RKey())
		require.False(t, live[k], "cycle %d: key %#x of a live region reissued", i, k)
		require.NotEqual(t, prm.InvalidLKey, k)
		require.Less(t, keyIndex(k), uint32(numberLimit))
		idx := keyIndex(k)
		indices[idx] = true
		if prev, ok := last[idx]; ok {
			require.Equal(t, (prev+1)&0xff, k&0xff, "cycle %d: index %#x reused with the next variant", i, idx)
		}
		last[idx] = k
		require.NoError(t, m.Close())
	}
	require.Len(t, indices, left-1, "the free indices at the end of the space are recycled")
	for idx := range indices {
		require.NotEqual(t, keyIndex(kept.LKey()), idx)
	}
}

// TestStaleRKeyAfterIndexReuse deregisters a region, registers another
// that gets the same index, and writes with the old rkey: the write fails
// with a remote access error and the new region is untouched, while the
// new rkey works.
func TestStaleRKeyAfterIndexReuse(t *testing.T) {
	e := newEnv(t, Options{})
	a, _ := e.rcPair(qpOpts{})
	leaveKeys(e.f, 1)
	old, err := e.pd2.RegisterMemory(e.mem2(8192, 4096), allAccess)
	require.NoError(t, err)
	stale := old.RKey()
	require.NoError(t, old.Close())
	fresh, err := e.pd2.RegisterMemory(e.mem2(16384, 4096), allAccess)
	require.NoError(t, err)
	require.Equal(t, keyIndex(stale), keyIndex(fresh.RKey()), "the freed index is reused")
	require.NotEqual(t, stale, fresh.RKey(), "with another variant")

	i := a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(16384), fresh.RKey()), inlineSeg([]byte{1, 2, 3, 4}))
	e.run()
	c := a.scq.one(t)
	require.Equal(t, prm.CQEReq, c.op, "write with the live rkey: %+v", c)
	require.Equal(t, i, c.counter)
	require.Equal(t, []byte{1, 2, 3, 4}, e.mem2(16384, 4))

	before := append([]byte(nil), e.mem2(16384, 4096)...)
	i = a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(16384+64), stale), inlineSeg([]byte{9, 9, 9, 9}))
	e.run()
	requireErr(t, a.scq.one(t), prm.CQEReqErr, prm.SyndromeRemoteAccess, i)
	require.Equal(t, before, e.mem2(16384, 4096), "a stale rkey writes nothing")
}

// TestKeyVariantWraps reuses a single index: it carries 256 different keys
// before the first comes back, as an mlx5 mkey's 8-bit variant does.
func TestKeyVariantWraps(t *testing.T) {
	e := newEnv(t, Options{})
	leaveKeys(e.f, 1)
	seen := map[uint32]bool{}
	var first uint32
	for i := 0; i <= 256; i++ {
		m, err := e.pd.RegisterMemory(e.mem(0, 64), allAccess)
		require.NoError(t, err)
		k := m.LKey()
		require.NoError(t, m.Close())
		if i == 0 {
			first = k
		}
		if i == 256 {
			require.Equal(t, first, k, "the variant wraps after 256 reuses")
			break
		}
		require.False(t, seen[k], "key %#x issued twice within 256 reuses", k)
		seen[k] = true
		require.Equal(t, keyIndex(first), keyIndex(k))
	}
}

// TestKeysExhausted registers until every index is live: the next register
// fails with ENOMEM and changes nothing; deregistering one makes room.
func TestKeysExhausted(t *testing.T) {
	e := newEnv(t, Options{})
	leaveKeys(e.f, 2)
	m1, err := e.pd.RegisterMemory(e.mem(0, 64), allAccess)
	require.NoError(t, err)
	m2, err := e.pd.RegisterMemory(e.mem(64, 64), allAccess)
	require.NoError(t, err)
	e.f.mu.Lock()
	regions := len(e.f.mrs)
	e.f.mu.Unlock()
	_, err = e.pd.RegisterMemory(e.mem(128, 64), allAccess)
	requireExhausted(t, err)
	require.Contains(t, err.Error(), "register MR")
	e.f.mu.Lock()
	require.Len(t, e.f.mrs, regions, "a refused register leaves no region behind")
	e.f.mu.Unlock()
	require.NoError(t, m1.Close())
	m3, err := e.pd.RegisterMemory(e.mem(128, 64), allAccess)
	require.NoError(t, err)
	require.Equal(t, keyIndex(m1.LKey()), keyIndex(m3.LKey()))
	require.NotEqual(t, m2.LKey(), m3.LKey())
}

// newBareQP creates a small QP of the type on the CQs (and SRQ, for a DCT).
func newBareQP(pd *ctx.ProtectionDomain, typ ctx.QPType, c *ctx.CompletionQueue, srq *ctx.SharedReceiveQueue) (*ctx.QueuePair, error) {
	cfg := ctx.QueuePairConfig{Type: typ, SendCQ: c, RecvCQ: c}
	switch typ {
	case ctx.QPTypeDCT:
		cfg.SRQ = srq
	default:
		cfg.Caps = ctx.QueuePairCaps{SendDepth: 4, RecvDepth: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	}
	return pd.CreateQueuePair(cfg)
}

// TestQPNsAreReused creates and destroys many more QPs than the end of the
// QPN space holds, with one QP kept: creation keeps working, no live QPN is
// reissued, and no QPN leaves the 24-bit field or takes the multicast QPN.
// With every QPN live, a create (a DCT's too: it shares the space) fails
// with ENOMEM until one is destroyed.
func TestQPNsAreReused(t *testing.T) {
	e := newEnv(t, Options{})
	c := e.newCQ(e.c, 64, 0)
	srq := e.newSRQ(e.pd, 16, 1)
	const left = 4
	leaveQPNs(e.f, left)
	kept, err := newBareQP(e.pd, ctx.QPTypeRC, c.cq, nil)
	require.NoError(t, err)
	live := map[uint32]bool{kept.QPN(): true}
	seen := map[uint32]bool{}
	types := []ctx.QPType{ctx.QPTypeRC, ctx.QPTypeUD, ctx.QPTypeDCI, ctx.QPTypeDCT}
	for i := 0; i < 40; i++ {
		q, err := newBareQP(e.pd, types[i%len(types)], c.cq, srq.srq)
		require.NoError(t, err, "create %d", i)
		n := q.QPN()
		require.False(t, live[n], "create %d: live QPN %#x reissued", i, n)
		require.Less(t, n, uint32(0xffffff), "QPN %#x", n)
		require.GreaterOrEqual(t, n, uint32(2), "QPN %#x: QP0 and QP1 are reserved", n)
		seen[n] = true
		require.NoError(t, q.Close())
	}
	require.Len(t, seen, left-1, "the freed QPNs are reused")

	// Fill the space.
	var qs []*ctx.QueuePair
	for i := 0; i < left-1; i++ {
		q, err := newBareQP(e.pd, ctx.QPTypeUD, c.cq, nil)
		require.NoError(t, err)
		require.False(t, live[q.QPN()])
		live[q.QPN()] = true
		qs = append(qs, q)
	}
	require.Len(t, live, left)
	e.f.mu.Lock()
	qps := len(e.f.qps)
	e.f.mu.Unlock()
	_, err = newBareQP(e.pd, ctx.QPTypeRC, c.cq, nil)
	requireExhausted(t, err)
	require.Contains(t, err.Error(), "create RC QP")
	_, err = newBareQP(e.pd, ctx.QPTypeDCT, c.cq, srq.srq)
	requireExhausted(t, err)
	e.f.mu.Lock()
	require.Len(t, e.f.qps, qps, "a refused create leaves no QP behind")
	e.f.mu.Unlock()

	freed := qs[1].QPN()
	require.NoError(t, qs[1].Close())
	q, err := newBareQP(e.pd, ctx.QPTypeRC, c.cq, nil)
	require.NoError(t, err)
	require.Equal(t, freed, q.QPN(), "the one free QPN")
}

// TestQPNReuseIsOldestFirst frees QPNs in an order and checks that, once
// the never-issued numbers are gone, they come back in that order: a
// destroyed QP's number stays unused as long as the space allows.
func TestQPNReuseIsOldestFirst(t *testing.T) {
	e := newEnv(t, Options{})
	c := e.newCQ(e.c, 64, 0)
	leaveQPNs(e.f, 6)
	var qs []*ctx.QueuePair
	for i := 0; i < 3; i++ {
		q, err := newBareQP(e.pd, ctx.QPTypeRC, c.cq, nil)
		require.NoError(t, err)
		qs = append(qs, q)
	}
	order := []uint32{qs[2].QPN(), qs[0].QPN(), qs[1].QPN()}
	for _, i := range []int{2, 0, 1} {
		require.NoError(t, qs[i].Close())
	}
	var got []uint32
	for i := 0; i < 6; i++ {
		q, err := newBareQP(e.pd, ctx.QPTypeRC, c.cq, nil)
		require.NoError(t, err)
		got = append(got, q.QPN())
	}
	for _, n := range got[:3] {
		require.NotContains(t, order, n, "never-issued QPNs come first")
	}
	require.Equal(t, order, got[3:], "then freed QPNs, oldest first")
}

// TestCQNsAndSRQNsAreReused runs the CQ and SRQ number spaces to their end:
// create and destroy keeps working, a full space refuses with ENOMEM.
func TestCQNsAndSRQNsAreReused(t *testing.T) {
	e := newEnv(t, Options{})
	leaveCQNs(e.f, 2)
	leaveSRQNs(e.f, 2)
	keptCQ, err := e.c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 4})
	require.NoError(t, err)
	keptSRQ, err := e.pd.CreateSRQ(ctx.SRQConfig{Depth: 4})
	require.NoError(t, err)
	for i := 0; i < 20; i++ {
		cq, err := e.c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 4, EventChannel: i%2 == 0})
		require.NoError(t, err, "CQ %d", i)
		require.NotEqual(t, keptCQ.CQN(), cq.CQN())
		require.Less(t, cq.CQN(), uint32(numberLimit))
		srq, err := e.pd.CreateSRQ(ctx.SRQConfig{Depth: 4})
		require.NoError(t, err, "SRQ %d", i)
		require.NotEqual(t, keptSRQ.SRQN(), srq.SRQN())
		require.Less(t, srq.SRQN(), uint32(numberLimit))
		if i < 19 {
			require.NoError(t, cq.Close())
			require.NoError(t, srq.Close())
		}
	}
	_, err = e.c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 4, EventChannel: true})
	requireExhausted(t, err)
	require.Contains(t, err.Error(), "create CQ")
	_, err = e.pd.CreateSRQ(ctx.SRQConfig{Depth: 4})
	requireExhausted(t, err)
	require.Contains(t, err.Error(), "create SRQ")
}

// TestNumberSpaceAgainstASet drives a small space with random takes and
// gives and checks it against a set of live numbers: a live number is never
// taken, every number of the space is taken before any is refused, and
// freed numbers return oldest first.
func TestNumberSpaceAgainstASet(t *testing.T) {
	const first, limit = 10, 74
	s := newNumberSpace(first, limit)
	rng := rand.New(rand.NewSource(7))
	live := map[uint32]bool{}
	var queue []uint32 // freed, oldest first
	for step := 0; step < 200000; step++ {
		if rng.Intn(2) == 0 && len(live) > 0 {
			// Free a random live number.
			k := rng.Intn(len(live))
			var n uint32
			for x := range live {
				if k == 0 {
					n = x
					break
				}
				k--
			}
			delete(live, n)
			s.give(n)
			queue = append(queue, n)
			continue
		}
		n, fresh, ok := s.take()
		if len(live) == limit-first {
			require.False(t, ok, "step %d: a full space hands out %d", step, n)
			continue
		}
		require.True(t, ok, "step %d: refused with %d of %d live", step, len(live), limit-first)
		require.False(t, live[n], "step %d: live number %d taken", step, n)
		require.GreaterOrEqual(t, n, uint32(first))
		require.Less(t, n, uint32(limit))
		if !fresh {
			require.Equal(t, queue[0], n, "step %d: oldest freed first", step)
			queue = queue[1:]
		}
		live[n] = true
	}
	require.LessOrEqual(t, cap(s.freed), 4*(limit-first), "the freed queue stays bounded")
}
