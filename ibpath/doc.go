// Package ibpath describes the route between a local queue pair and a remote
// one as a single value, and turns it into the attributes of the INIT, RTR
// and RTS transitions and into address vectors.
//
// It owns the mapping from a connection's parameters (port, pkey index,
// qkey, MTU, retry counts, timers, QPNs and PSNs, LIDs, GIDs, SL, traffic
// class, hop limit, rate) to ctx.QPAttr and ctx.AddressAttr; it does not
// create queue pairs and does not post. Package endpoint carries the half of
// a Path a peer must learn; package ibpath fills a Path from it.
//
// # Connecting
//
//	p, _ := ibpath.Local(dev, ibpath.Default(), 1, ctx.GIDSelector{}) // port 1, GID chosen
//	p.SQPN, p.SQPSN = qp.QPN(), psn
//	// send p.Endpoint(endpoint.TransportRC) to the peer, receive theirs
//	p, err = p.Connect(remote)                    // checks the untrusted endpoint
//	err = ibpath.ModifyToConnected(qp, p, ctx.AccessRemoteWrite|ctx.AccessLocalWrite)
//
// ModifyToInit, ModifyToRTR and ModifyToRTS do the steps one at a time.
//
// # Datagrams
//
// An AddressCache creates the address handle of a destination once: the
// second send to the same path finds its ud.Remote (for ud.QP.Post) or its
// address vector (for a DC or raw send WQE) with one map lookup and no
// allocation. Reply builds the path back to the sender of a received UD
// datagram from its completion, a transport.Poller's Completion or a raw CQE
// (source QPN, SLID, SL, path bits), and the GRH in the first 40 bytes of
// the receive buffer, read by transport.ParseGRH: an InfiniBand GRH (also
// RoCE v1), the IPv6 header of RoCE v2, or for RoCE v2 over IPv4 20
// undefined bytes and the IPv4 header. The reply leaves from the GID table
// entry of the same kind (RoCE v2 or not) as the datagram came.
//
//	in := *wc                                          // a receive from the transport.Poller
//	back, err := ibpath.Reply(&in, buf[:ud.GRHSize], local, gids)
//	r, err := cache.Remote(qp, back)                   // cached per destination
//	st, err := qp.Post(wrid, wqebuilder.Signaled, r)
package ibpath
