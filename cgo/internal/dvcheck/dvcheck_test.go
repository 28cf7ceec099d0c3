//go:build cgo

package dvcheck

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// prmValues maps every entry of Values to the prm constant that must equal
// it.
var prmValues = map[string]int64{
	"sizeof(mlx5_wqe_ctrl_seg)":                         prm.CtrlSize,
	"offsetof(mlx5_wqe_ctrl_seg.opmod_idx_opcode)":      prm.CtrlOpmodIdxOpcode,
	"offsetof(mlx5_wqe_ctrl_seg.qpn_ds)":                prm.CtrlQPNDS,
	"offsetof(mlx5_wqe_ctrl_seg.signature)":             prm.CtrlSignature,
	"offsetof(mlx5_wqe_ctrl_seg.dci_stream_channel_id)": prm.CtrlDCIStreamID,
	"offsetof(mlx5_wqe_ctrl_seg.fm_ce_se)":              prm.CtrlFmCeSe,
	"offsetof(mlx5_wqe_ctrl_seg.imm)":                   prm.CtrlImm,

	"sizeof(mlx5_wqe_raddr_seg)":             prm.RaddrSize,
	"offsetof(mlx5_wqe_raddr_seg.raddr)":     prm.RaddrAddr,
	"offsetof(mlx5_wqe_raddr_seg.rkey)":      prm.RaddrRkey,
	"offsetof(mlx5_wqe_raddr_seg.reserved)":  prm.RaddrResvd,
	"sizeof(mlx5_wqe_atomic_seg)":            prm.AtomicSize,
	"offsetof(mlx5_wqe_atomic_seg.swap_add)": prm.AtomicSwapAdd,
	"offsetof(mlx5_wqe_atomic_seg.compare)":  prm.AtomicCompare,

	"sizeof(mlx5_wqe_data_seg)":                  prm.DataSize,
	"offsetof(mlx5_wqe_data_seg.byte_count)":     prm.DataByteCount,
	"offsetof(mlx5_wqe_data_seg.lkey)":           prm.DataLKey,
	"offsetof(mlx5_wqe_data_seg.addr)":           prm.DataAddr,
	"sizeof(mlx5_wqe_inl_data_seg)":              prm.InlineHeaderSize,
	"offsetof(mlx5_wqe_inl_data_seg.byte_count)": 0,

	"sizeof(mlx5_wqe_av)":                     prm.AVSize,
	"offsetof(mlx5_wqe_av.key.qkey.qkey)":     prm.AVQKey,
	"offsetof(mlx5_wqe_av.key.qkey.reserved)": prm.AVQKeyResvd,
	"offsetof(mlx5_wqe_av.key.dc_key)":        prm.AVDCKey,
	"offsetof(mlx5_wqe_av.dqp_dct)":           prm.AVDQPDCT,
	"offsetof(mlx5_wqe_av.stat_rate_sl)":      prm.AVStatRateSL,
	"offsetof(mlx5_wqe_av.fl_mlid)":           prm.AVFlMLID,
	"offsetof(mlx5_wqe_av.rlid)":              prm.AVRLID,
	"offsetof(mlx5_wqe_av.reserved0)":         prm.AVReserved0,
	"offsetof(mlx5_wqe_av.rmac)":              prm.AVRMAC,
	"offsetof(mlx5_wqe_av.tclass)":            prm.AVTClass,
	"offsetof(mlx5_wqe_av.hop_limit)":         prm.AVHopLimit,
	"offsetof(mlx5_wqe_av.grh_gid_fl)":        prm.AVGRHGIDFL,
	"offsetof(mlx5_wqe_av.rgid)":              prm.AVRGID,
	"sizeof(mlx5_wqe_datagram_seg)":           prm.AVSize,
	"offsetof(mlx5_wqe_datagram_seg.av)":      0,

	"sizeof(mlx5_wqe_srq_next_seg)":                  prm.SRQNextSize,
	"offsetof(mlx5_wqe_srq_next_seg.next_wqe_index)": prm.SRQNextWQEIndex,
	"offsetof(mlx5_wqe_srq_next_seg.signature)":      prm.SRQNextSignature,

	"sizeof(mlx5_cqe64)":                      prm.CQE64Size,
	"offsetof(mlx5_cqe64.wqe_id)":             prm.CQEWQEID,
	"offsetof(mlx5_cqe64.ml_path)":            prm.CQEMLPath,
	"offsetof(mlx5_cqe64.slid)":               prm.CQESLID,
	"offsetof(mlx5_cqe64.flags_rqpn)":         prm.CQEFlagsRQPN,
	"offsetof(mlx5_cqe64.hds_ip_ext)":         prm.CQEHdsIPExt,
	"offsetof(mlx5_cqe64.l4_hdr_type_etc)":    prm.CQEL4HdrTypeEtc,
	"offsetof(mlx5_cqe64.vlan_info)":          prm.CQEVlanInfo,
	"offsetof(mlx5_cqe64.srqn_uidx)":          prm.CQESRQNUIdx,
	"offsetof(mlx5_cqe64.imm_inval_pkey)":     prm.CQEImmInvalPkey,
	"offsetof(mlx5_cqe64.app)":                prm.CQEApp,
	"offsetof(mlx5_cqe64.app_op)":             prm.CQEAppOp,
	"offsetof(mlx5_cqe64.app_info)":           prm.CQEAppInfo,
	"offsetof(mlx5_cqe64.byte_cnt)":           prm.CQEByteCnt,
	"offsetof(mlx5_cqe64.timestamp)":          prm.CQETimestamp,
	"offsetof(mlx5_cqe64.sop_drop_qpn)":       prm.CQESopDropQPN,
	"offsetof(mlx5_cqe64.wqe_counter)":        prm.CQEWQECounter,
	"offsetof(mlx5_cqe64.signature)":          prm.CQESignature,
	"offsetof(mlx5_cqe64.op_own)":             prm.CQEOpOwn,
	"sizeof(mlx5_err_cqe)":                    prm.CQE64Size,
	"offsetof(mlx5_err_cqe.srqn)":             prm.ErrCQESRQN,
	"offsetof(mlx5_err_cqe.vendor_err_synd)":  prm.ErrCQEVendorSyndrome,
	"offsetof(mlx5_err_cqe.syndrome)":         prm.ErrCQESyndrome,
	"offsetof(mlx5_err_cqe.s_wqe_opcode_qpn)": prm.ErrCQEWQEOpcodeQPN,
	"offsetof(mlx5_err_cqe.wqe_counter)":      prm.CQEWQECounter,
	"offsetof(mlx5_err_cqe.signature)":        prm.CQESignature,
	"offsetof(mlx5_err_cqe.op_own)":           prm.CQEOpOwn,

	"MLX5_OPCODE_NOP":              int64(prm.OpNop),
	"MLX5_OPCODE_SEND_INVAL":       int64(prm.OpSendInval),
	"MLX5_OPCODE_RDMA_WRITE":       int64(prm.OpRdmaWrite),
	"MLX5_OPCODE_RDMA_WRITE_IMM":   int64(prm.OpRdmaWriteImm),
	"MLX5_OPCODE_SEND":             int64(prm.OpSend),
	"MLX5_OPCODE_SEND_IMM":         int64(prm.OpSendImm),
	"MLX5_OPCODE_TSO":              int64(prm.OpTSO),
	"MLX5_OPCODE_RDMA_READ":        int64(prm.OpRdmaRead),
	"MLX5_OPCODE_ATOMIC_CS":        int64(prm.OpAtomicCS),
	"MLX5_OPCODE_ATOMIC_FA":        int64(prm.OpAtomicFA),
	"MLX5_OPCODE_ATOMIC_MASKED_CS": int64(prm.OpAtomicMaskedCS),
	"MLX5_OPCODE_ATOMIC_MASKED_FA": int64(prm.OpAtomicMaskedFA),
	"MLX5_OPCODE_FMR":              int64(prm.OpFMR),
	"MLX5_OPCODE_LOCAL_INVAL":      int64(prm.OpLocalInval),
	"MLX5_OPCODE_CONFIG_CMD":       int64(prm.OpConfigCmd),
	"MLX5_OPCODE_SET_PSV":          int64(prm.OpSetPSV),
	"MLX5_OPCODE_UMR":              int64(prm.OpUMR),
	"MLX5_OPCODE_TAG_MATCHING":     int64(prm.OpTagMatching),
	"MLX5_OPCODE_FLOW_TBL_ACCESS":  int64(prm.OpFlowTblAccess),
	"MLX5_OPCODE_MMO":              int64(prm.OpMMO),

	"MLX5_CQE_OWNER_MASK":    prm.CQEOwnerMask,
	"MLX5_CQE_REQ":           int64(prm.CQEReq),
	"MLX5_CQE_RESP_WR_IMM":   int64(prm.CQERespWrImm),
	"MLX5_CQE_RESP_SEND":     int64(prm.CQERespSend),
	"MLX5_CQE_RESP_SEND_IMM": int64(prm.CQERespSendImm),
	"MLX5_CQE_RESP_SEND_INV": int64(prm.CQERespSendInv),
	"MLX5_CQE_RESIZE_CQ":     int64(prm.CQEResizeCQ),
	"MLX5_CQE_NO_PACKET":     int64(prm.CQENoPacket),
	"MLX5_CQE_SIG_ERR":       int64(prm.CQESigErr),
	"MLX5_CQE_REQ_ERR":       int64(prm.CQEReqErr),
	"MLX5_CQE_RESP_ERR":      int64(prm.CQERespErr),
	"MLX5_CQE_INVALID":       int64(prm.CQEInvalid),

	"MLX5_CQE_L3_HDR_TYPE_NONE": prm.CQEL3HdrTypeNone,
	"MLX5_CQE_L3_HDR_TYPE_IPV6": prm.CQEL3HdrTypeIPv6,
	"MLX5_CQE_L3_HDR_TYPE_IPV4": prm.CQEL3HdrTypeIPv4,

	"MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR":        int64(prm.SyndromeLocalLength),
	"MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR":         int64(prm.SyndromeLocalQPOp),
	"MLX5_CQE_SYNDROME_LOCAL_PROT_ERR":          int64(prm.SyndromeLocalProt),
	"MLX5_CQE_SYNDROME_WR_FLUSH_ERR":            int64(prm.SyndromeWRFlush),
	"MLX5_CQE_SYNDROME_MW_BIND_ERR":             int64(prm.SyndromeMWBind),
	"MLX5_CQE_SYNDROME_BAD_RESP_ERR":            int64(prm.SyndromeBadResp),
	"MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR":        int64(prm.SyndromeLocalAccess),
	"MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR":    int64(prm.SyndromeRemoteInvalReq),
	"MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR":       int64(prm.SyndromeRemoteAccess),
	"MLX5_CQE_SYNDROME_REMOTE_OP_ERR":           int64(prm.SyndromeRemoteOp),
	"MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR": int64(prm.SyndromeTransportRetryExc),
	"MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR":       int64(prm.SyndromeRNRRetryExc),
	"MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR":      int64(prm.SyndromeRemoteAborted),
	"MLX5_CQE_VENDOR_SYNDROME_ODP_PFAULT":       prm.VendorSyndromeODPPageFault,

	"MLX5_WQE_CTRL_CQ_UPDATE":             int64(prm.FlagCQUpdate),
	"MLX5_WQE_CTRL_SOLICITED":             int64(prm.FlagSolicited),
	"MLX5_WQE_CTRL_FENCE":                 int64(prm.FlagFence),
	"MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE": int64(prm.FlagInitiatorSmallFence),
	"MLX5_INLINE_SEG":                     prm.InlineSeg,
	"MLX5_EXTENDED_UD_AV":                 prm.ExtendedUDAV,
	"MLX5_INVALID_LKEY":                   prm.InvalidLKey,
	"MLX5_CQ_DOORBELL":                    prm.CQDoorbellOffset,
	"MLX5_CQ_DB_REQ_NOT_SOL":              prm.CQArmSolicited,
	"MLX5_CQ_DB_REQ_NOT":                  prm.CQArmAny,
	"MLX5_RCV_DBR":                        prm.DoorbellRecordRecv,
	"MLX5_SND_DBR":                        prm.DoorbellRecordSend,
	"MLX5_SEND_WQE_BB":                    prm.WQEBBSize,
	"MLX5_SEND_WQE_SHIFT":                 prm.WQEBBShift,
	"MLX5_INLINE_SCATTER_32":              prm.InlineScatter32,
	"MLX5_INLINE_SCATTER_64":              prm.InlineScatter64,
}

// dvStructValues are the LP64 layouts of the mlx5dv_init_obj output structs
// that the cgo provider copies into ctx descriptors, worked out by hand from
// the header: pointers and off_t take 8 bytes, uint32_t 4, uint64_t 8 with
// 8-byte alignment.
var dvStructValues = map[string]int64{
	"sizeof(mlx5dv_qp)":                   96,
	"offsetof(mlx5dv_qp.dbrec)":           0,
	"offsetof(mlx5dv_qp.sq.buf)":          8,
	"offsetof(mlx5dv_qp.sq.wqe_cnt)":      16,
	"offsetof(mlx5dv_qp.sq.stride)":       20,
	"offsetof(mlx5dv_qp.rq.buf)":          24,
	"offsetof(mlx5dv_qp.rq.wqe_cnt)":      32,
	"offsetof(mlx5dv_qp.rq.stride)":       36,
	"offsetof(mlx5dv_qp.bf.reg)":          40,
	"offsetof(mlx5dv_qp.bf.size)":         48,
	"offsetof(mlx5dv_qp.comp_mask)":       56,
	"offsetof(mlx5dv_qp.uar_mmap_offset)": 64,
	"offsetof(mlx5dv_qp.tirn)":            72,
	"offsetof(mlx5dv_qp.tisn)":            76,
	"offsetof(mlx5dv_qp.rqn)":             80,
	"offsetof(mlx5dv_qp.sqn)":             84,
	"offsetof(mlx5dv_qp.tir_icm_addr)":    88,

	"sizeof(mlx5dv_cq)":             48,
	"offsetof(mlx5dv_cq.buf)":       0,
	"offsetof(mlx5dv_cq.dbrec)":     8,
	"offsetof(mlx5dv_cq.cqe_cnt)":   16,
	"offsetof(mlx5dv_cq.cqe_size)":  20,
	"offsetof(mlx5dv_cq.cq_uar)":    24,
	"offsetof(mlx5dv_cq.cqn)":       32,
	"offsetof(mlx5dv_cq.comp_mask)": 40,

	"sizeof(mlx5dv_srq)":             48,
	"offsetof(mlx5dv_srq.buf)":       0,
	"offsetof(mlx5dv_srq.dbrec)":     8,
	"offsetof(mlx5dv_srq.stride)":    16,
	"offsetof(mlx5dv_srq.head)":      20,
	"offsetof(mlx5dv_srq.tail)":      24,
	"offsetof(mlx5dv_srq.comp_mask)": 32,
	"offsetof(mlx5dv_srq.srqn)":      40,
}

func TestLayoutsAndConstants(t *testing.T) {
	got := Values()
	require.NotEmpty(t, got)
	checked := 0
	for name, v := range got {
		if want, ok := prmValues[name]; ok {
			require.Equal(t, want, v, "%s: prm says %d, mlx5dv.h says %d", name, want, v)
			checked++
			continue
		}
		want, ok := dvStructValues[name]
		require.True(t, ok, "%s (= %d in mlx5dv.h) has no counterpart to check", name, v)
		if unsafe.Sizeof(uintptr(0)) == 8 {
			require.Equal(t, want, v, "%s", name)
		}
		checked++
	}
	for name := range prmValues {
		require.Contains(t, got, name, "expected from the header")
	}
	for name := range dvStructValues {
		require.Contains(t, got, name, "expected from the header")
	}
	require.Equal(t, len(prmValues)+len(dvStructValues), checked)
	t.Logf("%d offsets, sizes and constants agree with infiniband/mlx5dv.h", checked)
}

// iterations is how many random inputs each encoder is compared on.
const iterations = 10000

// newRand returns a generator with a fixed seed (or MLX5KIT_DVCHECK_SEED),
// logged so that a failure can be replayed.
func newRand(t *testing.T) *rand.Rand {
	seed := uint64(0x6d6c7835)
	if s := os.Getenv("MLX5KIT_DVCHECK_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 0, 64)
		require.NoError(t, err, "MLX5KIT_DVCHECK_SEED")
		seed = v
	}
	t.Logf("seed %#x (set MLX5KIT_DVCHECK_SEED to change)", seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

func randBuf(r *rand.Rand) (b [BufSize]byte) {
	for i := 0; i < BufSize; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

func TestPutCtrlMatchesMlx5dv(t *testing.T) {
	r := newRand(t)
	for i := 0; i < iterations; i++ {
		goBuf := randBuf(r)
		// mlx5dv_set_ctrl_seg leaves the DCI stream id alone, PutCtrl clears
		// it: start both from a cleared one.
		goBuf[prm.CtrlDCIStreamID], goBuf[prm.CtrlDCIStreamID+1] = 0, 0
		cBuf := goBuf
		pi, op, opmod := uint16(r.Uint32()), uint8(r.Uint32()), uint8(r.Uint32())
		qpn, fm, ds, sig, imm := r.Uint32(), uint8(r.Uint32()), uint8(r.Uint32()), uint8(r.Uint32()), r.Uint32()
		if i%4 == 0 { // the shapes the kit really posts
			qpn &= prm.CtrlQPNMask
			ds &= prm.CtrlDSMask
			sig = 0
		}
		SetCtrlSeg(&cBuf, pi, op, opmod, qpn, fm, ds, sig, imm)
		prm.PutCtrl(unsafe.Pointer(&goBuf), pi, prm.Opcode(op), opmod, qpn, fm, ds, sig, imm)
		if goBuf != cBuf {
			t.Fatalf("iteration %d: pi=%#x op=%#x opmod=%#x qpn=%#x fm=%#x ds=%#x sig=%#x imm=%#x\n go %x\n  C %x",
				i, pi, op, opmod, qpn, fm, ds, sig, imm, goBuf, cBuf)
		}
	}
}

func TestPutDataMatchesMlx5dv(t *testing.T) {
	r := newRand(t)
	for i := 0; i < iterations; i++ {
		goBuf := randBuf(r)
		cBuf := goBuf
		length, lkey, addr := r.Uint32(), r.Uint32(), r.Uint64()
		if unsafe.Sizeof(uintptr(0)) < 8 {
			addr = uint64(uintptr(addr))
		}
		SetDataSeg(&cBuf, length, lkey, addr)
		prm.PutData(unsafe.Pointer(&goBuf), length, lkey, addr)
		if goBuf != cBuf {
			t.Fatalf("iteration %d: length=%#x lkey=%#x addr=%#x\n go %x\n  C %x", i, length, lkey, addr, goBuf, cBuf)
		}
	}
}

func TestPutAVMatchesMlx5dv(t *testing.T) {
	r := newRand(t)
	for i := 0; i < iterations; i++ {
		goBuf := randBuf(r)
		cBuf := goBuf
		key, dqp, ext := r.Uint64(), r.Uint32(), uint8(r.Uint32())
		srs, fl, rlid := uint8(r.Uint32()), uint8(r.Uint32()), uint16(r.Uint32())
		tclass, hop, grh := uint8(r.Uint32()), uint8(r.Uint32()), r.Uint32()
		var rmac [6]byte
		var rgid [16]byte
		for j := range rmac {
			rmac[j] = byte(r.Uint32())
		}
		for j := range rgid {
			rgid[j] = byte(r.Uint32())
		}
		if i%4 == 0 { // UD as the kit posts it: qkey in the upper half, ext 1
			key = uint64(uint32(key)) << 32
			dqp &= prm.AVDQPNMask
			ext = 1
		}
		SetDgramSeg(&cBuf, key, dqp, ext, srs, fl, rlid, rmac, tclass, hop, grh, rgid)
		prm.PutAV(unsafe.Pointer(&goBuf), key, dqp, ext, srs, fl, rlid, &rmac, tclass, hop, grh, &rgid)
		if goBuf != cBuf {
			t.Fatalf("iteration %d: key=%#x dqp=%#x ext=%#x srs=%#x fl=%#x rlid=%#x rmac=%x tclass=%d hop=%d grh=%#x rgid=%x\n go %x\n  C %x",
				i, key, dqp, ext, srs, fl, rlid, rmac, tclass, hop, grh, rgid, goBuf, cBuf)
		}
	}
}

// TestPutAVUDAndDCMatchMlx5dv checks PutAVUD and PutAVDC against
// the dgram segment mlx5dv_set_dgram_seg builds with the same key and
// remote number, given the same path part.
func TestPutAVUDAndDCMatchMlx5dv(t *testing.T) {
	r := newRand(t)
	for i := 0; i < iterations; i++ {
		base := randBuf(r)
		rmac := [6]byte(base[prm.AVRMAC : prm.AVRMAC+6])
		rgid := [16]byte(base[prm.AVRGID : prm.AVRGID+16])
		srs, fl, rlid := base[prm.AVStatRateSL], base[prm.AVFlMLID], uint16(base[prm.AVRLID])<<8|uint16(base[prm.AVRLID+1])
		tclass, hop := base[prm.AVTClass], base[prm.AVHopLimit]
		grh := prm.Load32(unsafe.Pointer(&base[prm.AVGRHGIDFL]))
		remote := r.Uint32() & prm.AVDQPNMask

		qkey := r.Uint32()
		cBuf, goBuf := base, base
		SetDgramSeg(&cBuf, uint64(qkey)<<32, remote, 1, srs, fl, rlid, rmac, tclass, hop, grh, rgid)
		prm.PutAVUD(unsafe.Pointer(&goBuf), qkey, remote)
		require.Equal(t, cBuf, goBuf, "UD iteration %d", i)

		dcKey := r.Uint64()
		cBuf, goBuf = base, base
		SetDgramSeg(&cBuf, dcKey, remote, 1, srs, fl, rlid, rmac, tclass, hop, grh, rgid)
		prm.PutAVDC(unsafe.Pointer(&goBuf), dcKey, remote)
		require.Equal(t, cBuf, goBuf, "DC iteration %d", i)
	}
}
