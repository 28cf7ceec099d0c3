package verbs

import (
	"errors"
	"syscall"
	"testing"

	"github.com/mlx5kit/mlx5kit/internal/devattr"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/stretchr/testify/require"
)

// The int-returning verbs return the error number itself and need not set
// errno: a stale errno from an earlier call must not win over the returned
// value.
func TestRetErrorUsesReturnValue(t *testing.T) {
	require.NoError(t, retError("ibv_modify_qp", "", 0, syscall.EAGAIN))

	err := retError("ibv_modify_qp", "RC QP 0x1a INIT→RTR", int(syscall.EINVAL), syscall.EAGAIN)
	require.Error(t, err)
	require.ErrorIs(t, err, syscall.EINVAL)
	require.NotErrorIs(t, err, syscall.EAGAIN)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.Equal(t, "cgo: ibv_modify_qp RC QP 0x1a INIT→RTR: EINVAL (invalid argument)", err.Error())

	var ve *VerbError
	require.True(t, errors.As(err, &ve))
	require.Equal(t, "ibv_modify_qp", ve.Verb)
	require.Equal(t, syscall.EINVAL, ve.Errno)
}

func TestRetErrorNegative(t *testing.T) {
	// -1 with errno set: a legacy path; errno is the cause.
	err := retError("ibv_destroy_cq", "", -1, syscall.EBUSY)
	require.ErrorIs(t, err, syscall.EBUSY)
	require.ErrorIs(t, err, ctx.ErrBusy)
	// -errno without errno.
	err = retError("ibv_query_gid_table", "", -int(syscall.EOPNOTSUPP), nil)
	require.ErrorIs(t, err, syscall.EOPNOTSUPP)
	require.ErrorIs(t, err, ctx.ErrNotSupported)
}

func TestPtrErrorUsesErrno(t *testing.T) {
	err := ptrError("ibv_reg_mr", "4096 bytes", syscall.ENOMEM)
	require.ErrorIs(t, err, syscall.ENOMEM)
	require.ErrorIs(t, err, ctx.ErrNoMemory)
	require.Contains(t, err.Error(), "ibv_reg_mr")
	require.Contains(t, err.Error(), "ENOMEM")

	// NULL without errno still yields an error that names the verb.
	err = ptrError("ibv_create_ah", "", nil)
	require.ErrorIs(t, err, syscall.EIO)
	require.Contains(t, err.Error(), "ibv_create_ah")
}

func TestVerbErrorSentinelOnly(t *testing.T) {
	err := error(&VerbError{Verb: "mlx5dv_is_supported", Detail: `"rxe0"`, Sentinel: ErrNotMLX5})
	require.ErrorIs(t, err, ErrNotMLX5)
	require.Equal(t, `cgo: mlx5dv_is_supported "rxe0": not an mlx5 device`, err.Error())

	err = &VerbError{Verb: "ibv_get_device_list", Detail: `no device named "x"`, Errno: syscall.ENODEV, Sentinel: ctx.ErrNotFound}
	require.ErrorIs(t, err, syscall.ENODEV)
	require.ErrorIs(t, err, ctx.ErrNotFound)
	require.Contains(t, err.Error(), "ENODEV")
	require.Contains(t, err.Error(), ctx.ErrNotFound.Error())
}

func TestErrnoSentinels(t *testing.T) {
	for errno, want := range map[syscall.Errno]error{
		syscall.EINVAL:     ctx.ErrInvalidArgument,
		syscall.EFAULT:     ctx.ErrInvalidArgument,
		syscall.EOPNOTSUPP: ctx.ErrNotSupported,
		syscall.ENOSYS:     ctx.ErrNotSupported,
		syscall.ENOTTY:     ctx.ErrNotSupported,
		syscall.ENOMEM:     ctx.ErrNoMemory,
		syscall.EBUSY:      ctx.ErrBusy,
		syscall.ENODEV:     ctx.ErrNoDevice,
		syscall.ENODATA:    ctx.ErrNotFound,
	} {
		require.ErrorIs(t, errnoError("v", "", errno), want, errno.Error())
	}
	require.Nil(t, errnoSentinel(syscall.EPERM))
	require.Len(t, errnoError("v", "", syscall.EPERM).Unwrap(), 1)
}

func TestDVAttrHelpers(t *testing.T) {
	var a DVAttr
	require.False(t, a.CQECompression())
	a.CQECompressionMaxNum = 64
	require.False(t, a.CQECompression(), "the hash format is needed")
	a.CQECompressionFormats = devattr.CQECompressionFormatChecksum | devattr.CQECompressionFormatHash
	require.True(t, a.CQECompression())
	a.CompMask = devattr.DVMaskCQECompression | devattr.DVMaskDCIStreams
	require.True(t, a.Has(devattr.DVMaskCQECompression))
	require.True(t, a.Has(devattr.DVMaskCQECompression|devattr.DVMaskDCIStreams))
	require.False(t, a.Has(devattr.DVMaskCQECompression|devattr.DVMaskStridingRQ))
	a.Flags = devattr.DVFlagCQEVersion1
	require.True(t, a.CQEVersion1())
}
