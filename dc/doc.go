// Package dc is the dynamically-connected transport of mlx5kit: DC
// initiators (DCI) that reach any DC target (DCT) by its number and DC
// access key, and DCTs that receive through a shared receive queue.
//
// # Initiators and targets
//
//	srq, err := transport.NewSharedReceiveQueue(pd, ctx.SRQConfig{Depth: 256})
//	dct, err := dc.NewDCT(pd, recvCQ, dc.DCTConfig{SRQ: srq, Key: 0x1234})
//	ep := dct.Endpoint()                 // DCT number, DC access key, LID/GID, MTU
//
//	dci, err := dc.NewDCI(pd2, sendCQ, dc.DCIConfig{SendDepth: 64})
//	remote, err := dci.NewRemote(ep)     // an address handle: control plane
//	s, err := dci.Post(wrid, wqebuilder.Signaled, remote)
//	err = s.RdmaWrite(raddr, rkey).SGE(addr, n, lkey).FinishBlueFlame()
//
// One DCI sends to any number of DCTs, one Remote per target; each WQE
// carries the target's address vector, DCT number and key (wqebuilder's
// DC stage). A DCI is ready to post when NewDCI returns, a DCT ready to
// receive when NewDCT returns. A wrong DC access key completes the WQE
// with REMOTE_ACCESS_ERR and moves the DCI to error; the DCT is unaffected.
//
// # Completions
//
// A DCI's send completions and a DCT's receive completions are matched by
// QPN (a DCT's QPN is its DCT number) through a transport.Poller, exactly
// as for RC: add the DCI and the DCT to the Pollers of their CQs. Receive
// completions of a DCT hand its SRQ's WQEs back to the SRQ. See package rc
// for the polling pattern and why it inlines.
//
// # Threading
//
// A DCI, a DCT, their pollers and the SRQ belong to one goroutine at a
// time. Their Close is the exception: any goroutine may call it, also
// while the owner posts and polls (see transport.Queue.Close).
package dc
