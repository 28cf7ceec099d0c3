// Package sim is a software model of an mlx5 HCA: a provider for package
// ctx that needs no NIC. It hands out the same descriptors a device gives
// through mlx5dv_init_obj (send and receive rings, doorbell records, a
// BlueFlame page, CQ rings and a CQ UAR page, all in mmap'd memory), reads
// the WQEs the data plane writes, in the PRM format, when a doorbell record
// moves, executes them between registered memory regions with the checks a
// device makes, and writes real CQEs.
//
// # The model
//
// A Fabric is a set of HCAs on one subnet, with one QPN space. Each HCA is a
// device ("sim0", "sim1", …) with one port; two Contexts opened on different
// devices reach each other by LID (InfiniBand link layer) or GID (Ethernet).
// An Ethernet port's GID table is laid out as a ConnectX fills it for a
// network device with an IPv4 and a global IPv6 address: link-local RoCE v1
// and v2 (0, 1), IPv4-mapped v1 and v2 (2, 3), global IPv6 v1 and v2 (4,
// 5); an InfiniBand port has the port GID at index 0.
// The package registers a default Fabric as provider "sim", running its own
// engine goroutine; ctx.Open opens it only when it is chosen
// (Options.Provider "sim" or MLX5KIT_PROVIDER=sim), never as a fallback
// when no hardware is found.
// Tests build a private Fabric with New and drive it with Step and
// RunUntilIdle for deterministic results.
//
// Executed: SEND, SEND_IMM, SEND_INV, RDMA_WRITE, RDMA_WRITE_IMM, RDMA_READ,
// ATOMIC_CS, ATOMIC_FA, masked CS/FA on 4 and 8 bytes, NOP; inline data and
// scatter/gather lists; WQEs and inline data that wrap at the ring end. RC
// in order between connected QPs with RNR NAK retries (min_rnr_timer,
// rnr_retry) and transport retries (timeout, retry_cnt) towards an absent
// or unready peer, or (within one process) one whose path does not lead
// back; UD by address vector, remote QPN and qkey, with the 40-byte GRH
// space in receive buffers (a wrong qkey drops silently); DC from
// a DCI to any DCT by DCT number and DC access key. Receive queues and SRQs
// (free list linked by next_wqe_index); scatter-to-CQE for small payloads.
// Atomics on 8 bytes treat remote memory as a 64-bit value in host byte
// order and return the old value in host byte order, as a ConnectX in the
// mode mlx5_core sets and mlx5_ib reports as IBV_ATOMIC_HCA; masked
// atomics on 4 bytes work on a big-endian 32-bit value.
//
// On an Ethernet port the GRH space of a UD receive holds what a ConnectX
// writes for the GID the datagram left from: the InfiniBand GRH for a RoCE
// v1 GID, the IPv6 header (next header UDP) for a RoCE v2 GID, and for a
// RoCE v2 IPv4-mapped GID 20 zero bytes followed by the IPv4 header with
// its checksum. Every receive CQE there carries that network header type
// in bits 25..24 of flags_rqpn (prm.CQERoCEL3*), where InfiniBand has SL.
//
// Errors follow the device: local protection (LOCAL_PROT_ERR), local
// length (LOCAL_LENGTH_ERR), remote access (REMOTE_ACCESS_ERR), remote
// invalid request, remote operation, RNR and transport retry exceeded, and a
// QP in error flushes every outstanding WQE with WR_FLUSH_ERR exactly once.
// A CQ that would overrun moves to error (reported by CQError and as an
// EventCQError async event) and the QPs that complete into it follow;
// nothing is overwritten.
//
// Completion queues hold 64- or 128-byte CQEs, always written in full: CQE
// compression (ctx.CompletionQueueConfig.Compression) is refused with
// ctx.ErrNotSupported, and DeviceAttr.CQECompression is false, so code
// that needs mini-CQE sessions is not silently run without them. 128-byte
// CQE padding is accepted (the model writes whole 128-byte CQEs anyway),
// and a completion vector below DeviceAttr.CompVectors (4) is accepted and
// changes nothing: the model has no interrupts.
//
// # Strict mode
//
// With Options.Strict the model records format violations a device would
// reject or silently misbehave on: a ds count that disagrees with the
// segments, a doorbell record not written big-endian, a producer index that
// goes backwards or jumps past the ring, a WQE index in the control segment
// that does not match the producer index, a QPN in the control segment that
// is not the QP's, an opcode the transport does not allow, a zero-length
// receive entry, (in Manual mode) BlueFlame buffer bytes that differ from
// the WQE in the ring, and a send doorbell record that moved with no write
// to the QP's doorbell register since (ViolationDoorbellRecordOnly: a
// ConnectX starts send work on the register write, so such a program hangs
// on hardware; receive queues have a record only and are not checked).
// Violations and CheckViolations return them; StrictFatal rejects the
// offending WQE with LOCAL_QP_OP_ERR, and holds WQEs announced by the
// record alone until the register is written. The default Fabric is strict
// unless MLX5KIT_SIM_STRICT=0 ("fatal" makes it StrictFatal).
//
// The register a strict Fabric watches for a QP of its own is the one its
// descriptor names (Descriptor().BlueFlame: the QP's own, or the device's
// shared doorbell-only one). In Manual mode a record moved alone is
// reported in the round that reads it; in Engine mode, which may read the
// record between a post's two stores, once it has been ahead of the
// register for a second. Strict mode executes those WQEs all the same, as
// it executes a WQE with a wrong index or QPN.
//
// # Running
//
// Manual mode (the default for New): nothing happens until the caller calls
// Step (one round: every QP executes at most one WQE) or RunUntilIdle.
// Time is virtual: when only timers remain (RNR and retry waits, delayed
// completions) RunUntilIdle moves the clock to the next one. Engine mode: a
// goroutine polls the doorbell records like a device, spinning briefly after
// work and then sleeping with a growing back-off, until Close.
//
// # Faults
//
// InjectUDFaults drops, duplicates and reorders UD packets (seeded, so
// runs repeat); FailQP moves a QP to error; DelayCompletions holds the CQEs
// of a CQ back for a while; InjectCQE writes a raw CQE.
//
// # Safety
//
// Whatever bytes are in a ring, the model never reads or writes memory
// outside the rings it owns and the regions registered with it, and never
// panics: every address a WQE names is checked against a registered region
// before it is touched.
package sim
