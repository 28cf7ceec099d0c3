// Package channel is the comfortable layer over the transports: a Channel
// is one connected queue pair to one peer with its completion queue, a
// MultiChannel one queue pair per peer (or one DC initiator for all of
// them) sharing a protection domain, so that a memory region registered
// once serves every peer.
//
// It owns the channel's queues, its completion queue and the bookkeeping
// that ties each completion to the request that caused it; the protection
// domain and the memory regions are the caller's.
//
// # Building
//
// A builder enforces its required steps with types: a protection domain,
// then the peers, then Build.
//
//	p, err := channel.New().PD(pd).Peers(16).With(opts).Build()
//	p.Share(mr)                          // peers may write to and read from mr
//	mine := p.Endpoints()                // mine[j] goes to peer j (package endpoint)
//	mc, err := p.Handshake(theirs)       // theirs[j] came from peer j
//
// Handshake checks every endpoint before it connects anything. Over TCP,
// Prepared.HandshakeConn swaps endpoints with one peer, and Mesh,
// AcceptMesh and DialMesh connect N ranks; both ends first prove to each
// other that they hold a pre-shared key (endpoint.Security), so a stranger
// on the network learns no address or rkey.
//
// # Three levels
//
// Blocking calls post and return when the work has completed: Send,
// Receive, Write, Read, CompareSwap, FetchAdd, ScatterSend, ScatterWrite,
// GatherReceive, GatherRead and MulticastSend (the same buffer to a set of
// peers). Errors of several requests are joined. The atomics work on an
// 8-byte big-endian value in the peer's memory and leave the value they
// found, big-endian, in an 8-byte local Result buffer.
//
// Scope runs a function whose posts return Pending handles to poll at
// will; before Scope returns, every request posted in it has completed, and
// the error of each failed one is reported, joined.
//
// Raw posts (PostSend, PostReceive, PostWrite, PostRead, PostCompareSwap,
// PostFetchAdd) return a Pending
// and never wait: Poll drives completions, Pending.Poll, Done and Wait look
// at one request.
//
// Scopes and raw posts allocate nothing on their hot path (the tests assert
// it); a failed request allocates its error.
//
// # RC and DC
//
// With Options.Transport = TransportDC the same interface runs over one DC
// initiator that reaches a DC target per peer; see docs/guide.md for the
// memory per peer of each.
//
// # Errors
//
// A failed request is reported as a *PeerError (peer, kind of request)
// wrapping a *completion.Error (status, syndrome, vendor syndrome, opcode,
// QPN, wqe_counter, work request id), so errors.Is(err,
// completion.ErrRemoteAccess) and errors.As(err, &ce) work on the joined
// error.
package channel
