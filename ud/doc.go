// Package ud is the unreliable-datagram transport of mlx5kit: queue pairs
// that send to any peer through an address vector, a remote QPN and a qkey,
// and receive with 40 bytes of GRH space in front of every payload.
//
// # Sending and replying
//
//	qp, err := ud.New(pd, cq, ud.Config{SendDepth: 64, RecvDepth: 64, QKey: 0x11111111})
//	ep := qp.Endpoint()                     // QPN, qkey, LID/GID, MTU
//	remote, err := qp.NewRemote(peerEP)     // an address handle: control plane
//	s, err := qp.Post(wrid, wqebuilder.Signaled, remote)
//	err = s.Send().SGE(addr, n, lkey).FinishBlueFlame()
//
// A receive buffer must hold GRHSize (40) bytes before the payload: the
// device writes the GRH there when the packet has one, and leaves the space
// unused otherwise; Completion.ByteCount counts those 40 bytes. A receive
// completion names its sender (SourceQPN, SLID, SL, GRH), and ReplyRemote
// turns it into a Remote to answer, to the sender's LID and, with a GRH,
// to the sender's GID in the buffer's first 40 bytes.
//
// On RoCE every datagram has a GRH, and the 40 bytes hold the packet's
// network header, which depends on the GID type the sender used: an
// InfiniBand GRH for RoCE v1; the IPv6 header for RoCE v2 (next header 17,
// UDP, and a payload length that counts the UDP header); for RoCE v2 over
// IPv4, 20 undefined bytes and then the IPv4 header, whose addresses stand
// for the IPv4-mapped GIDs ::ffff:a.b.c.d. The CQE says which in bits
// 25..24 of flags_rqpn (monocq.CQE.RoCEL3Type), the bits that carry SL on
// InfiniBand: on RoCE, Completion.SL holds those bits, not a service level.
//
// Datagrams are unreliable: a send completes when it leaves, whether or not
// the peer had a receive posted or knew the qkey (a wrong qkey drops the
// datagram silently). The payload of one datagram is at most the path MTU;
// larger sends complete with LOCAL_LENGTH_ERR.
//
// # Completions
//
// Completions are matched by QPN through a transport.Poller, as in package
// rc (see there for the pattern and why it inlines); one Poller serves the
// queue pairs of every transport on a CQ.
//
// # Threading
//
// A QP and its pollers belong to one goroutine at a time. Close is the
// exception: any goroutine may call it, also while the owner posts and
// polls.
package ud
