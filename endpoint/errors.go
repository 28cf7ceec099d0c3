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

// The specific reasons an [*Error] wraps. Only ErrTooManyRegions is
// exported: a caller can act on it (send fewer regions); the others are
// told apart by Error.Field and Error.Detail.
var (
	// errBadMagic: the first four bytes are not the endpoint magic.
	errBadMagic = errors.New("bad magic")
	// errVersion: the version is not one this package decodes.
	errVersion = errors.New("unsupported version")
	// errTruncated: the input ends before the length the header announces.
	errTruncated = errors.New("truncated")
	// errTrailingBytes: bytes follow the end of the encoded endpoint.
	errTrailingBytes = errors.New("trailing bytes")
	// errLength: the body length disagrees with the region count, or
	// exceeds the largest valid body.
	errLength = errors.New("bad length")
	// errRange: a field is out of range (QPN, PSN or DCT number over 24
	// bits, MTU outside 1..5).
	errRange = errors.New("value out of range")
	// errUnknownTransport: the transport is not RC, UD or DC.
	errUnknownTransport = errors.New("unknown transport")
	// ErrTooManyRegions: more than MaxRegions remote regions.
	ErrTooManyRegions = errors.New("too many regions")
	// errRegionOverflow: a region's address plus length wraps past 2^64.
	errRegionOverflow = errors.New("region overflows the address space")
	// errAccess: a region's access flags carry bits outside AccessKnown.
	errAccess = errors.New("unknown access flags")
	// errReserved: a reserved field is not zero.
	errReserved = errors.New("reserved field not zero")
	// errNotApplicable: a field the transport does not use is not zero
	// (qkey on RC or DC, DCT number or DC access key on RC or UD).
	errNotApplicable = errors.New("field not applicable to transport")
)

// The operations an [*Error] names.
const (
	opValidate  = "validate"
	opMarshal   = "marshal"
	opUnmarshal = "unmarshal"
)

// Error reports which field of an endpoint, or which byte of its encoding,
// is wrong. It matches its reason (Err) with errors.Is, and also
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
	// Err is the reason: ErrTooManyRegions or an unexported sentinel.
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
