// Package transport is the data-plane machinery that packages rc, dc and ud
// share: the Queue that binds a created queue pair's send ring (a
// wqebuilder.SendQueue), its receive ring or shared receive queue and its
// data-plane state; the Poller that routes a completion queue's CQEs to the
// queue pairs added to it by QPN; the decoded Completion and its errors;
// shared receive queues; and the GRH parsing of UD receives.
//
// A program creates its queue pairs with rc, dc or ud and polls them with
// one Poller per completion queue, whatever their transport:
//
//	p, _ := transport.NewPoller(cq)
//	_ = p.Add(qp) // an *rc.QP, *ud.QP, *dc.DCI or *dc.DCT
//	p.Poll(64, func(c *transport.Completion) { /* c.Match, c.WRID, … */ })
//
// Poll and the function literal given to it compile into the caller's
// loop (docs/transports.md).
package transport
