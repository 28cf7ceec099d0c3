package ibpath_test

import (
	"fmt"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/ibpath"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// A path made from the local port and the endpoint the peer sent carries a
// queue pair from RESET to RTS.
func ExampleModifyToConnected() {
	fabric := sim.New(sim.Options{})
	defer fabric.Close()
	dev, _ := fabric.Open("sim0")
	defer dev.Close()
	pd, _ := dev.AllocProtectionDomain()
	cq, _ := dev.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 16})
	qp, _ := pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Caps: ctx.QueuePairCaps{SendDepth: 8, RecvDepth: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})

	p, err := ibpath.Local(dev, ibpath.Default(), 1, ctx.GIDSelector{}) // port 1, the GID chosen
	if err != nil {
		fmt.Println(err)
		return
	}
	p.SQPN, p.SQPSN = qp.QPN(), 0x100

	// What the peer sent over TCP (see package endpoint).
	remote := endpoint.Endpoint{Transport: endpoint.TransportRC, QPN: 0x2a, PSN: 0x200, LID: 7, MTU: ctx.MTU4096}
	p, err = p.Connect(remote)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("RTR: remote QPN 0x%x, RQ PSN 0x%x, DLID %d, MTU %v\n", p.DQPN, p.DQPSN, p.DLID, p.MTU)

	if err := ibpath.ModifyToConnected(qp, p, ctx.AccessLocalWrite|ctx.AccessRemoteWrite); err != nil {
		fmt.Println(err)
		return
	}
	state, _ := qp.State()
	fmt.Println("state:", state)
	// Output:
	// RTR: remote QPN 0x2a, RQ PSN 0x200, DLID 7, MTU 1024
	// state: RTS
}

// The address cache builds an address handle once per destination, and
// hands a UD queue pair the ud.Remote to post to.
func ExampleAddressCache() {
	fabric := sim.New(sim.Options{})
	defer fabric.Close()
	dev, _ := fabric.Open("sim0")
	defer dev.Close()
	pd, _ := dev.AllocProtectionDomain()
	cq, _ := dev.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 16})
	qp, err := ud.New(pd, cq, ud.Config{SendDepth: 8, RecvDepth: 8, MaxInline: 64, QKey: 0x11111111})
	if err != nil {
		fmt.Println(err)
		return
	}

	cache := ibpath.NewAddressCache(pd)
	defer cache.Close()
	to := ibpath.Default()
	to.DLID, to.DQPN, to.QKey = 2, 0x101, 0x11111111
	first, _ := cache.Remote(qp, to)
	to.DQPN = 0x102 // another QP behind the same port: the same address handle
	second, _ := cache.Remote(qp, to)
	again, _ := cache.Remote(qp, to)
	hits, misses := cache.Stats()
	fmt.Printf("QPNs %#x %#x, cached %v, handles built %d, found %d\n", first.QPN(), second.QPN(), again == second, misses, hits)

	st, err := qp.Post(1, wqebuilder.Signaled, second)
	if err == nil {
		err = st.Send().Inline([]byte("hello")).FinishBlueFlame()
	}
	fmt.Println("posted:", err)
	// Output:
	// QPNs 0x101 0x102, cached true, handles built 1, found 2
	// posted: <nil>
}
