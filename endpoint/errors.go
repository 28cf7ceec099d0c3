package endpoint

import (
	"errors"
	"fmt"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// ErrMalformed is the umbrella sentinel of decoding: every error from
// decoding untrusted bytes matches it. Every failure of a local endpoint's
// checks before it is encoded matches ctx.ErrInvalidArgument instead.
var ErrMalformed = errors.New("malformed endpoint encoding")

// Specific sentinels; an [*Error] matches exactly one of them.
var (
	// ErrBadMagic: the first four bytes are not the endpoint magic.
	ErrBadMagic = errors.New("bad magic")
	// ErrVersion: the version is not one this package decodes.
	ErrVersion = errors.New("unsupported version")
	// ErrTruncated: the input ends before the length the header announces.
	ErrTruncated = errors.New("truncated")
	// ErrTrailingBytes: bytes follow the end of the encoded endpoint.
	ErrTrailingBytes = errors.New("trailing bytes")
	// ErrLength: the body length disagrees with the region count, or
	// exceeds the largest valid body.
	ErrLength = errors.New("bad length")
	// ErrRange: a field is out of range (QPN, PSN or DCT number over 24
	// bits, MTU outside 1..5).
	ErrRange = errors.New("value out of range")
	// ErrUnknownTransport: the transport is not RC, UD or DC.
	ErrUnknownTransport = errors.New("unknown transport")
	// ErrTooManyRegions: more than MaxRegions remote regions.
	ErrTooManyRegions = errors.New("too many regions")
	// ErrRegionOverflow: a region's address plus length wraps past 2^64.
	ErrRegionOverflow = errors.New("region overflows the address space")
	// ErrAccess: a region's access flags carry bits outside AccessKnown.
	ErrAccess = errors.New("unknown access flags")
	// ErrReserved: a reserved field is not zero.
	ErrReserved = errors.New("reserved field not zero")
	// ErrNotApplicable: a field the transport does not use is not zero
	// (qkey on RC or DC, DCT number or DC access key on RC or UD).
	ErrNotApplicable = errors.New("field not applicable to transport")
)

// The operations an [*Error] names.
const (
	opValidate  = "validate"
	opMarshal   = "marshal"
	opUnmarshal = "unmarshal"
)

// Error reports which field of an endpoint, or which byte of its encoding,
// is wrong. It matches its specific sentinel (Err) with errors.Is, and also
// [ErrMalformed] when Op is "unmarshal" or [ctx.ErrInvalidArgument] otherwise.
type Error struct {
	// Op is "validate", "marshal" or "unmarshal".
	Op string
	// Field names the offending field, e.g. "qpn" or "region 3 access".
	Field string
	// Offset is the byte offset of the field in the encoding.
	Offset int
	// Detail says what is wrong with the value, e.g. "0x1000000 exceeds 24
	// bits".
	Detail string
	// Err is one of the specific sentinels (ErrRange, ErrTruncated, …).
	Err error
}

var _ error = (*Error)(nil)

// Error formats as "endpoint: unmarshal: qpn at byte 16: value out of
// range: 0x1000000 exceeds 24 bits".
func (e *Error) Error() string {
	msg := fmt.Sprintf("endpoint: %s: %s at byte %d: %v", e.Op, e.Field, e.Offset, e.Err)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Unwrap returns the specific sentinel.
func (e *Error) Unwrap() error { return e.Err }

// Is matches the umbrella sentinel of e's operation: ErrMalformed for
// decoding, ctx.ErrInvalidArgument for validating and encoding.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrMalformed:
		return e.Op == opUnmarshal
	case ctx.ErrInvalidArgument:
		return e.Op != opUnmarshal
	}
	return false
}

// errInvalid is ctx.ErrInvalidArgument, for the functions whose
// context.Context parameter is named ctx.
var errInvalid = ctx.ErrInvalidArgument
