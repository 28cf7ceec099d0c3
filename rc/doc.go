// Package rc is the reliable-connected transport of mlx5kit: create an RC
// queue pair from a ProtectionDomain and completion queues, connect it to a
// remote endpoint (QPN, LID or GID, PSN, MTU), post work requests through the
// typed stages of package wqebuilder, post receives to its receive queue or
// a shared receive queue, and turn its CQEs into completions.
//
// The same program runs on a real mlx5 device and on the software HCA
// (package sim): both fill in the same ring descriptors, and this package
// reads only those.
//
// # Life of a queue pair
//
//	qp, err := rc.New(pd, cq, rc.Config{SendDepth: 64, RecvDepth: 64})
//	// qp is in INIT: receives may be posted now.
//	local := qp.Endpoint()            // QPN, LID, GID, PSN, MTU: send it to the peer
//	err = qp.Connect(remote)          // INIT→RTR→RTS
//	s, err := qp.Post(wrid, wqebuilder.Signaled)
//	err = s.RdmaWrite(raddr, rkey).SGE(addr, n, lkey).FinishBlueFlame()
//
// Post refuses a QP that is not connected, is in error or is closed with a
// *wqebuilder.PostError wrapping transport.ErrNotConnected, transport.ErrQPError or ctx.ErrClosed; the stage it
// returns then writes nothing and its Finish fails too, so a caller that
// ignores the error corrupts nothing. The errors of the WQE itself (send
// queue full, inline too long, too many SGEs) come from Finish, as
// wqebuilder documents. A bad Config is refused by New before anything is
// created.
//
// Doorbells: FinishBlueFlame publishes one WQE at once; Finish on several
// WQEs followed by one RingDoorbell publishes a batch with one doorbell.
// Receives likewise: transport.RecvStage.FinishDoorbell, or Finish on
// several and one RingRecvDoorbell.
//
// # Completions
//
// Completions are polled from the CQ ring by package monocq and matched to
// their queue pair by QPN. A transport.Poller does both, for the queue
// pairs of every transport on one CQ:
//
//	p, err := transport.NewPoller(cq)
//	p.Add(qp)                  // every QP whose completions land in cq
//	p.Poll(64, func(c *transport.Completion) {
//		if err := c.Err(); err != nil { ... }
//		handle(c.WRID, c.Opcode, c.ByteCount, c.Immediate)
//	})
//
// For a send completion the queue pair retires the WQE the CQE names by its
// wqe_counter, and every unsignaled WQE before it, and Completion.WRID is
// the id given to Post for the named WQE. For a receive completion it is the
// id given to the receive. An error completion moves the queue pair to
// transport.StateError; the work requests still outstanding then complete with
// WR_FLUSH_ERR, each exactly once. Reset brings the QP back to INIT to
// Connect again.
//
// The hot path stays inlined. Go compiles a method called through a type
// parameter or an interface as an indirect call, so the poller has neither:
// Poll is a small method whose body is a closure called once, which the
// compiler inlines at the call site together with the function literal the
// caller passes; inside, the CQE is found through monocq's range form and
// dispatched with two array loads (monocq.Table); a successful send or
// receive completion is retired inline (Queue.CompleteSend,
// Queue.CompleteRecv), any other CQE with a direct call to Queue.Complete.
// The pattern for a caller that wants its own loop is the same without the
// Poller:
//
//	ring, err := transport.NewCQ(cq)         // a *monocq.CQ over cq's ring
//	var table monocq.Table[transport.Queue]
//	table.Register(qp.QPN(), &qp.Queue)
//	var wc transport.Completion
//	for c := range ring.All(64) {
//		if q := table.Lookup(c.QPN()); q != nil {
//			if !q.CompleteSend(c, &wc) && !q.CompleteRecv(c, &wc) { // inline
//				q.Complete(c, &wc) // errors and payloads in the CQE, a call
//			}
//			handle(&wc)
//		}
//	}
//
// Handle, Limits, Fail and Close come with the embedded transport.Queue, as
// on every transport's queue pair; a QP with its own receive CQ sets
// Config.RecvCQ.
//
// # Threading
//
// A queue pair, its pollers and the SRQ it uses belong to one goroutine at
// a time: posting, polling, Connect and Reset must not run concurrently.
// Close is the exception: Close and SharedReceiveQueue.Close may be
// called from any goroutine, also while the owner posts and polls, to stop
// its loop (its posts then fail with ctx.ErrClosed; the Pollers drop the
// closed queue pair on the owner's goroutine). Control-plane objects (ctx)
// may be shared.
//
// # Hardware notes
//
// A QP created through the hardware provider has scatter-to-CQE off unless
// Config.ScatterToCQE asks for it; with it on, Complete copies the payload
// from the CQE to the receive buffer as rdma-core does.
package rc
