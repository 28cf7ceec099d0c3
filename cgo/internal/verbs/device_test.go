//go:build cgo && linux

package verbs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/mlx5kit/mlx5kit/internal/devattr"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/qpstate"
	"github.com/stretchr/testify/require"
)

// hasRDMASubsystem reports whether uverbs devices are exposed where
// libibverbs looks for them: under SYSFS_PATH when it is set (the emulated
// kernel points it at its own tree under MLX5KIT_EMULATE=1), else /sys.
// Without them ibv_get_device_list has nothing to list.
func hasRDMASubsystem() bool {
	sysfs := os.Getenv("SYSFS_PATH")
	if sysfs == "" {
		sysfs = "/sys"
	}
	_, err := os.Stat(filepath.Join(sysfs, "class", "infiniband_verbs"))
	return err == nil
}

func TestListDevices(t *testing.T) {
	list, err := ListDevices()
	require.NoError(t, err)
	if !hasRDMASubsystem() {
		require.Empty(t, list, "no /sys/class/infiniband_verbs, yet devices were listed")
		require.Contains(t, NoDeviceReason(), "ENOSYS")
	}
	for _, d := range list {
		require.NotEmpty(t, d.Name)
		require.NotEmpty(t, d.NodeType)
	}
	p, err := Provider{}.Devices()
	require.NoError(t, err)
	mlx5 := 0
	for _, d := range list {
		if d.MLX5 {
			mlx5++
		}
	}
	require.Len(t, p, mlx5, "the provider lists exactly the mlx5 devices")
	if mlx5 == 0 {
		require.NotEmpty(t, NoDeviceReason())
	} else {
		require.Empty(t, NoDeviceReason())
	}
}

func TestOpenNonexistentDevice(t *testing.T) {
	d, err := Open("mlx5kit_no_such_device")
	require.Nil(t, d)
	require.Error(t, err)
	require.ErrorIs(t, err, ctx.ErrNotFound)
	require.ErrorIs(t, err, syscall.ENODEV)
	var ve *VerbError
	require.True(t, errors.As(err, &ve))
	require.Equal(t, "ibv_get_device_list", ve.Verb)
	require.Contains(t, err.Error(), `no device named "mlx5kit_no_such_device"`)
	require.Contains(t, err.Error(), "ENODEV")
}

func TestOpenDefaultWithoutDevice(t *testing.T) {
	if NoDeviceReason() == "" {
		t.Skip("an mlx5 device is present; TestHardware* cover opening it")
	}
	d, err := Open("")
	require.Nil(t, d)
	require.ErrorIs(t, err, ctx.ErrNoDevice)
	require.Contains(t, err.Error(), "ibv_get_device_list")
	require.Contains(t, err.Error(), "no mlx5 device")
}

func TestProviderRegistered(t *testing.T) {
	require.Contains(t, ctx.Providers(), ctx.ProviderHardware)
	require.True(t, Enabled)
	if NoDeviceReason() != "" {
		_, err := ctx.Open(ctx.Options{Provider: ctx.ProviderHardware})
		require.ErrorIs(t, err, ctx.ErrNoDevice)
		require.Contains(t, err.Error(), "ibv_get_device_list")
		_, err = ctx.Open(ctx.Options{Provider: ctx.ProviderHardware, Device: "nope0"})
		require.ErrorIs(t, err, ctx.ErrNotFound)
	}
}

// Masks are compared with the values of enum ibv_qp_attr_mask in verbs.h.
func TestModifyMask(t *testing.T) {
	const (
		state      = 1 << 0
		access     = 1 << 3
		pkey       = 1 << 4
		port       = 1 << 5
		qkey       = 1 << 6
		av         = 1 << 7
		pathMTU    = 1 << 8
		timeout    = 1 << 9
		retry      = 1 << 10
		rnrRetry   = 1 << 11
		rqPSN      = 1 << 12
		maxRdAtom  = 1 << 13
		minRNR     = 1 << 15
		sqPSN      = 1 << 16
		maxDestRd  = 1 << 17
		destQPN    = 1 << 20
		rcRTR      = state | av | pathMTU | destQPN | rqPSN | maxDestRd | minRNR
		rcRTS      = state | timeout | retry | rnrRetry | sqPSN | maxRdAtom
		dctRTR     = state | av | pathMTU | minRNR
		dciRTRBare = state | pathMTU
	)
	R, I, RTR, RTS, SQD, SQE, E := ctx.QPStateReset, ctx.QPStateInit, ctx.QPStateRTR, ctx.QPStateRTS, ctx.QPStateSQD, ctx.QPStateSQE, ctx.QPStateError
	for _, c := range []struct {
		typ       ctx.QPType
		cur, next ctx.QPState
		path      ctx.AddressAttr
		want      int
	}{
		{ctx.QPTypeRC, R, I, ctx.AddressAttr{}, state | pkey | port | access},
		{ctx.QPTypeRC, I, I, ctx.AddressAttr{}, state | pkey | port | access},
		{ctx.QPTypeRC, I, RTR, ctx.AddressAttr{}, rcRTR},
		{ctx.QPTypeRC, RTR, RTS, ctx.AddressAttr{}, rcRTS},
		{ctx.QPTypeRC, RTS, RTS, ctx.AddressAttr{}, state},
		{ctx.QPTypeUD, R, I, ctx.AddressAttr{}, state | pkey | port | qkey},
		{ctx.QPTypeUD, I, RTR, ctx.AddressAttr{}, state},
		{ctx.QPTypeUD, RTR, RTS, ctx.AddressAttr{}, state | sqPSN},
		{ctx.QPTypeDCI, R, I, ctx.AddressAttr{}, state | pkey | port},
		{ctx.QPTypeDCI, I, RTR, ctx.AddressAttr{}, dciRTRBare},
		// A DCI's path is not sent: the first DC kernels refuse IB_QP_AV.
		{ctx.QPTypeDCI, I, RTR, ctx.AddressAttr{GlobalRoute: true, DLID: 3}, dciRTRBare},
		{ctx.QPTypeDCI, RTR, RTS, ctx.AddressAttr{}, rcRTS},
		{ctx.QPTypeDCI, RTS, E, ctx.AddressAttr{}, state},
		{ctx.QPTypeDCT, R, I, ctx.AddressAttr{}, state | pkey | port | access},
		{ctx.QPTypeDCT, I, RTR, ctx.AddressAttr{}, dctRTR},
		{ctx.QPTypeRC, RTS, E, ctx.AddressAttr{}, state},
		{ctx.QPTypeRC, E, R, ctx.AddressAttr{}, state},
		{ctx.QPTypeRC, R, R, ctx.AddressAttr{}, state},
		{ctx.QPTypeUD, SQE, RTS, ctx.AddressAttr{}, state},
		{ctx.QPTypeRC, SQD, E, ctx.AddressAttr{}, state},
	} {
		a := ctx.QPAttr{State: c.next, Path: c.path}
		got, err := modifyMask(c.typ, c.cur, c.next, &a)
		require.NoError(t, err, "%v %v→%v", c.typ, c.cur, c.next)
		require.Equal(t, c.want, got, "%v %v→%v: mask %#x, want %#x", c.typ, c.cur, c.next, got, c.want)
	}
	// What a ConnectX refuses through mlx5_ib, each with EINVAL.
	for _, c := range []struct {
		typ       ctx.QPType
		cur, next ctx.QPState
	}{
		{ctx.QPTypeDCT, RTR, E},   // mlx5_ib_modify_dct: RESET→INIT and INIT→RTR only
		{ctx.QPTypeDCT, RTR, R},   // idem
		{ctx.QPTypeDCT, I, E},     // idem
		{ctx.QPTypeDCT, R, R},     // idem
		{ctx.QPTypeDCT, RTR, RTS}, // idem
		{ctx.QPTypeDCT, RTS, SQD},
		{ctx.QPTypeRC, RTS, SQD},  // no RTS→SQD command in optab
		{ctx.QPTypeUD, RTS, SQD},  // idem
		{ctx.QPTypeRC, SQD, RTS},  // no SQD→RTS in older optabs
		{ctx.QPTypeRC, R, E},      // not in qp_state_table
		{ctx.QPTypeUD, R, E},      // idem
		{ctx.QPTypeDCI, R, E},     // modify_dci_qp_is_ok: ERR from a state other than RESET
		{ctx.QPTypeDCI, RTS, R},   // older modify_dci_qp_is_ok: no RESET
		{ctx.QPTypeDCI, E, R},     // idem
		{ctx.QPTypeDCI, R, R},     // idem
		{ctx.QPTypeDCI, SQE, RTS}, // modify_dci_qp_is_ok has no SQE branch
		{ctx.QPTypeRC, R, RTR},
		{ctx.QPTypeRC, RTS, I},
		{ctx.QPTypeRC, RTR, RTR},
		{ctx.QPTypeUD, I, RTS},
		{ctx.QPType(99), R, I},
	} {
		_, err := modifyMask(c.typ, c.cur, c.next, &ctx.QPAttr{State: c.next})
		require.ErrorIs(t, err, ctx.ErrInvalidState, "%v %v→%v", c.typ, c.cur, c.next)
		require.ErrorIs(t, err, syscall.EINVAL, "%v %v→%v", c.typ, c.cur, c.next)
	}
}

// TestModifyMaskTable walks every (type, from, to): modifyMask agrees with
// the transition table on the verdict, the mask and the errno, and the
// mask it derives passes the table's own mask check.
func TestModifyMaskTable(t *testing.T) {
	legal := 0
	for _, typ := range qpstate.QPTypes {
		for _, from := range qpstate.States {
			for _, to := range qpstate.States {
				name := fmt.Sprintf("%v %v→%v", typ, from, to)
				r := qpstate.Lookup(typ, from, to)
				got, err := modifyMask(typ, from, to, &ctx.QPAttr{State: to, Path: ctx.AddressAttr{DLID: 1, GlobalRoute: true}})
				if !r.Legal {
					require.ErrorIs(t, err, syscall.EINVAL, name)
					require.ErrorIs(t, err, ctx.ErrInvalidState, name)
					require.Equal(t, ctx.ErrInvalidState, unwrapSentinel(err), name)
					continue
				}
				legal++
				require.NoError(t, err, name)
				require.NoError(t, qpstate.Check(typ, from, to, qpstate.Mask(got)), name)
				want, _ := qpstate.Derive(typ, from, to)
				require.Equal(t, int(want), got, name)
			}
		}
	}
	// RC 19, UD 19, DCI 11, DCT 2.
	require.Equal(t, 51, legal)
}

func TestCheckAttrRanges(t *testing.T) {
	rtrRC, err := modifyMask(ctx.QPTypeRC, ctx.QPStateInit, ctx.QPStateRTR, nil)
	require.NoError(t, err)
	rtsRC, err := modifyMask(ctx.QPTypeRC, ctx.QPStateRTR, ctx.QPStateRTS, nil)
	require.NoError(t, err)
	ok := ctx.QPAttr{PathMTU: ctx.MTU4096, RemoteQPN: 0xffffff, RQPSN: 0xffffff, MinRNRTimer: 31}
	require.NoError(t, checkAttr(rtrRC, &ok))
	for name, a := range map[string]ctx.QPAttr{
		"RemoteQPN":   {PathMTU: ctx.MTU1024, RemoteQPN: 1 << 24},
		"RQPSN":       {PathMTU: ctx.MTU1024, RQPSN: 1 << 24},
		"MinRNRTimer": {PathMTU: ctx.MTU1024, MinRNRTimer: 32},
		"PathMTU":     {PathMTU: 6},
		"not set":     {},
		"Path.SL":     {PathMTU: ctx.MTU1024, Path: ctx.AddressAttr{SL: 16}},
	} {
		err := checkAttr(rtrRC, &a)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, name)
		require.Contains(t, err.Error(), name)
	}
	require.ErrorIs(t, checkAttr(rtsRC, &ctx.QPAttr{RetryCount: 8}), ctx.ErrInvalidArgument)
	require.ErrorIs(t, checkAttr(rtsRC, &ctx.QPAttr{Timeout: 32}), ctx.ErrInvalidArgument)
	// Fields outside the mask are not looked at.
	require.NoError(t, checkAttr(rtsRC, &ctx.QPAttr{RemoteQPN: 1 << 30}))
}

func TestFillAddress(t *testing.T) {
	gid := ctx.GID{0xfe, 0x80, 15: 0x42}
	s, err := summarizeAH(ctx.AddressAttr{Port: 1, DLID: 0x17, SL: 3, SrcPathBits: 1, StaticRate: 2}, ctx.LinkLayerInfiniBand)
	require.NoError(t, err)
	require.Equal(t, uint16(0x17), s.dlid)
	require.Equal(t, uint8(3), s.sl)
	require.Equal(t, uint8(1), s.pathBits)
	require.Equal(t, uint8(2), s.staticRate)
	require.Equal(t, uint8(1), s.port)
	require.False(t, s.isGlobal)
	require.Equal(t, uintptr(16), s.sizeofGIDData)

	_, err = summarizeAH(ctx.AddressAttr{Port: 1}, ctx.LinkLayerEthernet)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument, "RoCE without a GRH")
	require.Contains(t, err.Error(), "GlobalRoute")

	s, err = summarizeAH(ctx.AddressAttr{Port: 2, GlobalRoute: true, DGID: gid, SGIDIndex: 3, FlowLabel: 0xabcde, TrafficClass: 106}, ctx.LinkLayerEthernet)
	require.NoError(t, err)
	require.True(t, s.isGlobal)
	require.Equal(t, [16]byte(gid), s.dgid)
	require.Equal(t, uint8(3), s.sgidIndex)
	require.Equal(t, uint32(0xabcde), s.flowLabel)
	require.Equal(t, uint8(106), s.trafficClass)
	require.Equal(t, uint8(64), s.hopLimit, "RoCE hop limit 0 becomes 64")

	s, err = summarizeAH(ctx.AddressAttr{Port: 1, GlobalRoute: true, DGID: gid, HopLimit: 0}, ctx.LinkLayerInfiniBand)
	require.NoError(t, err)
	require.Equal(t, uint8(0), s.hopLimit, "InfiniBand keeps the given hop limit")

	_, err = summarizeAH(ctx.AddressAttr{Port: 1, GlobalRoute: true, FlowLabel: 1 << 20}, ctx.LinkLayerEthernet)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
}

// TestGIDTypeMapping checks the mapping of enum ibv_gid_type.
func TestGIDTypeMapping(t *testing.T) {
	// enum ibv_gid_type: IB 0, RoCE v1 1, RoCE v2 2.
	require.Equal(t, ctx.GIDTypeIB, gidType(0))
	require.Equal(t, ctx.GIDTypeRoCEv1, gidType(1))
	require.Equal(t, ctx.GIDTypeRoCEv2, gidType(2))
	require.Equal(t, ctx.GIDType(0), gidType(7))
}

func TestBigEndianHelpers(t *testing.T) {
	// A __be64 0x0102030405060708 sits in memory as bytes 01..08.
	b := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	raw := *(*uint64)(unsafePointer(b))
	require.Equal(t, uint64(0x0102030405060708), be64(raw))
	raw32 := *(*uint32)(unsafePointer(b))
	require.Equal(t, uint32(0x01020304), be32(raw32))
}

func TestCheckCQConfig(t *testing.T) {
	cfg := func(c ctx.CompletionQueueConfig) *CQConfig { return &CQConfig{CompletionQueueConfig: c} }
	none := DVAttr{}
	hash := DVAttr{CQECompressionMaxNum: 64, CQECompressionFormats: devattr.CQECompressionFormatHash}
	both := DVAttr{CQECompressionMaxNum: 64, CQECompressionFormats: devattr.CQECompressionFormatHash | devattr.CQECompressionFormatChecksum,
		Flags: devattr.DVFlagCQE128Compression | devattr.DVFlagCQE128Padding}

	c := cfg(ctx.CompletionQueueConfig{Depth: 8})
	require.NoError(t, checkCQConfig(c, none))
	require.Equal(t, uint32(64), c.CQESize, "the default CQE size is filled")

	for _, tc := range []struct {
		name string
		cfg  ctx.CompletionQueueConfig
		dv   DVAttr
		want error
	}{
		{"hash without compression caps", ctx.CompletionQueueConfig{Depth: 8, Compression: ctx.CQECompressionHash}, none, ctx.ErrNotSupported},
		{"hash", ctx.CompletionQueueConfig{Depth: 8, Compression: ctx.CQECompressionHash}, hash, nil},
		{"checksum on a hash-only device", ctx.CompletionQueueConfig{Depth: 8, Compression: ctx.CQECompressionChecksum}, hash, ctx.ErrNotSupported},
		{"checksum", ctx.CompletionQueueConfig{Depth: 8, Compression: ctx.CQECompressionChecksum}, both, nil},
		{"formats but no sessions", ctx.CompletionQueueConfig{Depth: 8, Compression: ctx.CQECompressionHash}, DVAttr{CQECompressionFormats: devattr.CQECompressionFormatHash}, ctx.ErrNotSupported},
		{"compressed 128-byte CQEs without the flag", ctx.CompletionQueueConfig{Depth: 8, CQESize: 128, Compression: ctx.CQECompressionHash}, hash, ctx.ErrNotSupported},
		{"compressed 128-byte CQEs", ctx.CompletionQueueConfig{Depth: 8, CQESize: 128, Compression: ctx.CQECompressionHash}, both, nil},
		{"unknown format", ctx.CompletionQueueConfig{Depth: 8, Compression: 9}, both, ctx.ErrInvalidArgument},
		{"padding 64-byte CQEs", ctx.CompletionQueueConfig{Depth: 8, CQEPadding: true}, both, ctx.ErrInvalidArgument},
		{"padding without the flag", ctx.CompletionQueueConfig{Depth: 8, CQESize: 128, CQEPadding: true}, hash, ctx.ErrNotSupported},
		{"padding", ctx.CompletionQueueConfig{Depth: 8, CQESize: 128, CQEPadding: true}, both, nil},
		{"depth 0", ctx.CompletionQueueConfig{}, both, ctx.ErrInvalidArgument},
	} {
		err := checkCQConfig(cfg(tc.cfg), tc.dv)
		if tc.want == nil {
			require.NoError(t, err, tc.name)
		} else {
			require.ErrorIs(t, err, tc.want, tc.name)
		}
	}

	// The formats handed to mlx5dv_create_cq.
	_, ok := compressionFormat(ctx.CQECompressionNone)
	require.False(t, ok)
	f, ok := compressionFormat(ctx.CQECompressionHash)
	require.True(t, ok)
	require.Equal(t, uint32(1), f, "MLX5DV_CQE_RES_FORMAT_HASH")
	f, ok = compressionFormat(ctx.CQECompressionChecksum)
	require.True(t, ok)
	require.Equal(t, uint32(2), f, "MLX5DV_CQE_RES_FORMAT_CSUM")
}

// TestPrecheckModifyRangeErrno: a value checkAttr refuses (here a DCT's
// PathMTU left unset at RTR) is refused naming ibv_modify_qp with EINVAL,
// its reason said once; before, the errno was 0 and the sentinel's text
// came twice.
func TestPrecheckModifyRangeErrno(t *testing.T) {
	a := ctx.QPAttr{State: ctx.QPStateRTR, Path: ctx.AddressAttr{Port: 1, DLID: 1}}
	limits := func(int) (qpstate.Limits, error) { return qpstate.Limits{Ports: 1, PKeys: 128, GIDs: 1}, nil }
	_, err := precheckModify(ctx.QPTypeDCT, ctx.QPStateInit, &a, 1, limits, "DCT QP 0x10 INIT→RTR")
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.ErrorIs(t, err, syscall.EINVAL)
	var ve *VerbError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, syscall.EINVAL, ve.Errno)
	require.Equal(t, 1, strings.Count(err.Error(), "invalid argument"), err.Error())
	require.Contains(t, err.Error(), "PathMTU not set")
}

// TestBigEndianHostRefused: the data plane writes every device format and
// register with byte swaps that assume a little-endian host, so Open
// refuses a big-endian one (s390x's RoCE Express adapters are mlx5
// devices) rather than hand out queues whose descriptors the device would
// read byte-reversed.
func TestBigEndianHostRefused(t *testing.T) {
	require.NoError(t, checkHostByteOrder(true))
	err := checkHostByteOrder(false)
	require.ErrorIs(t, err, ctx.ErrNotSupported)
	require.Contains(t, err.Error(), "big-endian")
}

// TestActiveSpeedPrefersEx checks the port speed mk_query_port reports:
// active_speed_ex where libibverbs (49 and later) filled it, which holds XDR
// (256) where active_speed holds NDR (128), and active_speed where it is 0
// (an older library, or the write command).
func TestActiveSpeedPrefersEx(t *testing.T) {
	require.Equal(t, uint32(256), activeSpeedOf(128, 256), "XDR: active_speed_ex")
	require.Equal(t, uint32(32), activeSpeedOf(32, 32), "EDR in both")
	require.Equal(t, uint32(128), activeSpeedOf(128, 0), "no active_speed_ex: active_speed")
	require.Equal(t, uint32(0), activeSpeedOf(0, 0), "no speed")
}
