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
// New makes a Channel to one peer, NewMulti a MultiChannel to several; both
// take the protection domain and the Options (zero fields take the
// defaults).
//
//	p, err := channel.NewMulti(pd, 16, opts)
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
// On the software HCA, processes of one host reach each other when they
// name the same shared fabric (MLX5KIT_SIM_FABRIC, package sim). Each
// leaves it, removing its ring file from /dev/shm, with
// sim.Default().Close() as it exits; a process that does not leaves the
// file until another process joins or leaves that fabric (or
// sim.SweepFabric runs).
//
// # Three levels
//
// Blocking calls post and return when the work has completed: Send,
// Receive, Write, Read, CompareSwap, FetchAdd, ScatterSend, ScatterWrite,
// GatherReceive, GatherRead and MulticastSend (the same buffer to a set of
// peers). Errors of several requests are joined. The atomics work on an
// 8-byte value in host byte order in the peer's memory (a uint64 the
// peer reads with binary.NativeEndian, as a ConnectX's atomics do) and
// leave the value they found, in host byte order, in an 8-byte local
// Result buffer. On a device that reports no atomics
// (ctx.DeviceAttr.AtomicHCA false) every level refuses them before posting
// anything, with an error wrapping ctx.ErrNotSupported and EOPNOTSUPP, as
// libmlx5 refuses them at post.
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
// Each blocking call, Scope and Pending.Wait takes a context.Context first
// (see Contexts below).
//
// Scopes and raw posts allocate nothing on their hot path (the tests assert
// it); a failed request allocates its error.
//
// # Contexts
//
// Every blocking call (Send, Receive, Write, Read, CompareSwap, FetchAdd,
// ScatterSend, ScatterWrite, GatherReceive, GatherRead, MulticastSend),
// Scope and Pending.Wait takes a context.Context as its first argument, as
// Go APIs written after the context package do: one method per operation.
// A caller that never cancels passes context.Background().
//
// The context bounds the whole call: the waits for room in a full queue
// and for the completions. A context that has ended before the call makes
// it return at once, with nothing posted and the channel untouched. The wait loop looks at it without allocating
// (context.Background has no Done channel; another context's is looked at
// on every empty poll and every 64 polls that found work; a wait sleeping
// on completion events wakes with it). When it ends first, the error wraps
// the context's (errors.Is(err, context.Canceled) or
// context.DeadlineExceeded), and its cause where it has one
// (context.WithCancelCause), and names the call. A context from
// endpoint.WatchConn ends when the peer closes the connection the
// handshake ran over, with the cause endpoint.ErrPeerGone: a wait for a
// peer that has exited or was killed, which its queue pair alone may
// never notice, then ends. For a mesh, the context of an
// endpoint.MeshWatch does the same when any rank is gone.
//
// An ended wait does not end the work: the device owns a posted work
// request until its completion, and a receive, an RDMA READ or an atomic
// may still write its local buffer until then. So a blocking call or scope
// whose context ends fails the channel before it returns (MultiChannel.Fail):
// every queue moves to the error state, the device flushes each
// outstanding work request with a completion (WR_FLUSH_ERR), and the call
// polls until all of them have arrived, which takes microseconds on a NIC
// and on the software HCA. A DC channel's receives sit in shared receive
// queues, which the error state does not flush; those queues (and any that
// does not flush within a bound) are destroyed instead, which ends the
// device's access to their buffers as well. When the call returns, no
// buffer of any of the channel's work requests is written any more, and
// the error also wraps ErrFailed: the channel refuses new work, and the
// connection must be rebuilt (Close, a new channel, a new handshake; the
// peer sees its queue pair's requests fail).
//
// A call (or scope) whose context ends while it waits for room in a full
// queue, none of its own work being outstanding (the room is taken by raw
// posts, or by the work of a call that timed out), has nothing to flush:
// it returns the context's error with the queue's refusal, not
// ErrFailed, and leaves the channel and that other work as they are.
//
// Pending.Wait is the exception: it leaves the request outstanding
// and the channel working. The caller keeps the Pending, and must not
// reuse the request's buffers until Done reports true (wait again) or
// until Fail returned.
//
// Options.WaitTimeout is older and different: a wait with no completion for
// that long returns ErrTimeout and leaves the work outstanding.
//
// # Goroutines and closing
//
// A channel is used by one goroutine at a time, its owner, Close included.
// To end the owner's blocking call from another goroutine (a signal
// handler, a supervisor), cancel the call's context. Closing the ctx
// objects under the channel is also allowed from any goroutine, as in
// package transport: its Context, its protection domain or one of its
// queue pairs (MultiChannel.QP, MultiChannel.DCI). The work outstanding on
// a closed queue pair never completes, so the owner's wait then ends with
// an error wrapping ctx.ErrClosed ("its queue pairs were closed under
// it"), having closed the rest of the channel; the channel refuses work
// from then on and its Close returns nil.
//
// # RC and DC
//
// With Options.Transport = endpoint.TransportDC the same interface runs over one DC
// initiator that reaches a DC target per peer; see docs/guide.md for the
// memory per peer of each.
//
// # Errors
//
// A failed request is reported as a *PeerError (peer, kind of request)
// wrapping a *monocq.CompletionError (status, syndrome, vendor syndrome, opcode,
// QPN, wqe_counter, work request id), so errors.Is(err,
// monocq.ErrRemoteAccess) and errors.As(err, &ce) work on the joined
// error.
//
// A failed request moves its queue to the error state. On RC that is the
// peer's queue pair: its other outstanding requests, receives included,
// complete flushed (monocq.ErrFlushed), and later requests to that peer
// fail. On DC it is the one initiator, every peer's: the channel then fails
// as a whole (as Fail does), so its receives, which sit in shared receive
// queues that no error state flushes, complete flushed too instead of
// waiting for a peer that may be gone, and later requests fail with
// ErrFailed. Either way, rebuild the connection.
package channel
