// Package endpoint describes what a peer needs to reach a queue (QPN, LID,
// GID, PSN, MTU, DCT number, the remote memory it may use), encodes it to a
// small versioned binary form, and carries it over TCP.
//
// Of this module it imports only ctx (the types of its fields, such as
// ctx.MTU, ctx.GID and ctx.Access, and the sentinel errors) and internal
// helpers, never a provider, so the transports, the tools and the tests can
// all use it without pulling in a provider. It owns the wire format of an
// endpoint and the out-of-band exchange; it does not create queues,
// register memory or touch a device.
//
// # Endpoints
//
// An [Endpoint] is the connection information of one queue as the peer
// sees it: for RC the QPN and first PSN, for UD the QPN and qkey, for DC the
// DCT number and DC access key; in all cases the address (LID for
// InfiniBand, GID and GID index for RoCE or routed InfiniBand), the path MTU
// and a short list of [RemoteRegion] values (address, length, rkey, access)
// that the peer may target with RDMA READ, WRITE and atomics.
//
// # Wire format
//
// Every integer is big-endian. An encoded endpoint is an 8-byte header
// followed by a body whose length the header gives:
//
//	header   0  4  magic 0x4d584550 ("MXEP")
//	         4  2  version (1)
//	         6  2  body length in bytes
//	body     0  1  transport (1 RC, 2 UD, 3 DC)
//	         1  1  MTU (1..5, the IBV_MTU_* values)
//	         2  1  GID index
//	         3  1  region count (at most MaxRegions)
//	         4  2  LID
//	         6  2  reserved, zero
//	         8  4  QPN (24 bits)
//	        12  4  PSN (24 bits)
//	        16  4  qkey (UD only, else zero)
//	        20  4  DCT number (DC only, 24 bits, else zero)
//	        24  8  DC access key (DC only, else zero)
//	        32 16  GID
//	        48     regions, 24 bytes each: address u64, length u64,
//	               rkey u32, access u32
//
// A decoder reads the magic and version first and rejects any version it
// does not know, so a later version may change everything after them. The
// encoding is canonical: a decoded endpoint encodes back to the same bytes.
//
// # Untrusted input
//
// A peer's bytes are untrusted. [Endpoint.UnmarshalBinary] checks every
// field and reports the first violation as an [*Error] that matches
// [ErrMalformed] with errors.Is and names the field, its byte offset and
// what is wrong with it (too many regions also match [ErrTooManyRegions]).
// The same checks run on a local endpoint before it is encoded; those errors
// match [ctx.ErrInvalidArgument] instead of [ErrMalformed]. A failed decode
// leaves the receiver unchanged.
//
// # Exchange
//
// [Exchange] swaps one endpoint with the peer at the other end of a
// connection, one end on the [DialSide], the other on the [AcceptSide],
// under deadlines taken from the context (or 30 seconds when it has
// none), so a silent or hostile peer costs at most the timeout.
// [ListenMesh], [DialMesh] and [Mesh] connect N peers: rank 0 listens,
// ranks 1..N-1 dial it (with bounded retries while it comes up), and every
// peer receives the endpoint each other peer made for it. [WatchConn]
// tells a peer when the other end of an exchange's connection is gone,
// and a [MeshWatch] in [MeshOptions] tells every rank of a mesh when any
// rank is.
//
// # Who may connect
//
// An endpoint is a capability: with a region's address and rkey, anyone
// whose packets reach the queue pair may read or write that memory. So
// neither the exchange nor the mesh sends an endpoint, binds a rank or
// tells a peer anything about the mesh before the peer has proved that it
// holds the pre-shared key of [Security], but for the rank and peer count
// a dialer claims in its hello, which whoever answers at the address it
// dials reads before proving anything:
//
//	dialer    hello      nonce D, rank, peer count
//	listener  challenge  nonce L, HMAC(key, "proof" L-role D L rank peers)
//	dialer    proof      HMAC(key, "proof" D-role D L rank peers)
//	dialer    offer      its endpoints, HMAC tag
//	listener  table      the endpoints for the dialer, HMAC tag
//
// The proofs are HMAC-SHA256 over both fresh 32-byte nonces, the role of
// the prover, the protocol version and the claims, compared in constant
// time: a recorded proof is worthless against a new nonce, and a proof
// cannot be sent back to its maker (the roles differ). The dialer checks
// the listener's proof before it proves itself or sends anything, so a
// listener without the key learns no endpoint either. The offer and the
// table are sealed with a key derived from the nonces. Every message has
// a fixed or bounded size that is checked on the 12-byte header before
// anything is allocated; a listener bounds each connection's hello with
// [MeshOptions].HelloTimeout, retries temporary accept errors (out of
// file descriptors) backing off from 5 ms to 1 s, and answers every
// refusal (no key, wrong key, wrong rank or peer count, a rank taken,
// another version) with the same empty abort frame.
//
// With no key the exchange and the mesh refuse to run ([ErrKeyRequired]),
// unless [Security].InsecureLoopback is set, and then only between two ends
// on this host. [Mesh], which runs every rank in one process, makes a
// random key for each call. The key authenticates and seals; it does not
// hide the endpoints from whoever can read the network: for that, set
// [MeshOptions].TLS (or pass a *tls.Conn to Exchange).
package endpoint
