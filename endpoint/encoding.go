package endpoint

import (
	"encoding"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// encodingMagic is the first four bytes of an encoded endpoint: "MXEP".
const encodingMagic uint32 = 0x4d584550

// encodingVersion is the encoding version this package writes and reads.
const encodingVersion uint16 = 1

// Sizes of the encoding.
const (
	headerSize    = 8
	bodyFixedSize = 48
	regionSize    = 24

	// maxEncodedSize is the length of the largest valid encoding: a header,
	// the fixed body and MaxRegions regions.
	maxEncodedSize = headerSize + bodyFixedSize + MaxRegions*regionSize
)

// Absolute byte offsets of the fields in an encoding.
const (
	offMagic       = 0
	offVersion     = 4
	offLength      = 6
	offTransport   = headerSize + 0
	offMTU         = headerSize + 1
	offGIDIndex    = headerSize + 2
	offRegionCount = headerSize + 3
	offLID         = headerSize + 4
	offReserved    = headerSize + 6
	offQPN         = headerSize + 8
	offPSN         = headerSize + 12
	offQKey        = headerSize + 16
	offDCTNumber   = headerSize + 20
	offDCAccessKey = headerSize + 24
	offGID         = headerSize + 32
	offRegions     = headerSize + bodyFixedSize

	regionOffAddress   = 0
	regionOffLength    = 8
	regionOffRemoteKey = 16
	regionOffAccess    = 20
)

var (
	_ encoding.BinaryMarshaler   = Endpoint{}
	_ encoding.BinaryAppender    = Endpoint{}
	_ encoding.BinaryUnmarshaler = (*Endpoint)(nil)
)

// encodedSize returns the length of e's encoding.
func (e Endpoint) encodedSize() int { return headerSize + bodyFixedSize + len(e.Regions)*regionSize }

// MarshalBinary encodes e after checking every field; an invalid endpoint is
// an [*Error] matching [ctx.ErrInvalidArgument].
func (e Endpoint) MarshalBinary() ([]byte, error) {
	if err := e.check(); err != nil {
		err.Op = opMarshal
		return nil, err
	}
	return e.AppendBinary(make([]byte, 0, e.encodedSize()))
}

// AppendBinary appends e's encoding to b. On error b is returned unchanged.
func (e Endpoint) AppendBinary(b []byte) ([]byte, error) {
	if err := e.check(); err != nil {
		err.Op = opMarshal
		return b, err
	}
	be := binary.BigEndian
	b = be.AppendUint32(b, encodingMagic)
	b = be.AppendUint16(b, encodingVersion)
	b = be.AppendUint16(b, uint16(bodyFixedSize+len(e.Regions)*regionSize))
	b = append(b, byte(e.Transport), byte(e.MTU), e.GIDIndex, byte(len(e.Regions)))
	b = be.AppendUint16(b, e.LID)
	b = be.AppendUint16(b, 0)
	b = be.AppendUint32(b, e.QPN)
	b = be.AppendUint32(b, e.PSN)
	b = be.AppendUint32(b, e.QKey)
	b = be.AppendUint32(b, e.DCTNumber)
	b = be.AppendUint64(b, e.DCAccessKey)
	b = append(b, e.GID[:]...)
	for _, r := range e.Regions {
		b = be.AppendUint64(b, r.Address)
		b = be.AppendUint64(b, r.Length)
		b = be.AppendUint32(b, r.RemoteKey)
		b = be.AppendUint32(b, uint32(r.Access))
	}
	return b, nil
}

// UnmarshalBinary decodes an endpoint from data, which must hold exactly one
// encoding. Every field is checked; the first violation is an [*Error]
// matching [ErrMalformed] and its specific sentinel. On error e is left
// unchanged.
func (e *Endpoint) UnmarshalBinary(data []byte) error {
	d, n, err := decode(data)
	if err != nil {
		return err
	}
	if n != len(data) {
		return malformed("length", n, errTrailingBytes,
			fmt.Sprintf("%d bytes after the %d-byte endpoint", len(data)-n, n))
	}
	*e = d
	return nil
}

func malformed(field string, offset int, err error, detail string) *Error {
	return &Error{Op: opUnmarshal, Field: field, Offset: offset, Err: err, Detail: detail}
}

// checkHeader checks the 8-byte header h and returns the body length it
// announces.
func checkHeader(h []byte) (int, *Error) {
	be := binary.BigEndian
	if len(h) < headerSize {
		return 0, malformed("header", len(h), errTruncated,
			fmt.Sprintf("%d bytes, the header alone is %d", len(h), headerSize))
	}
	if m := be.Uint32(h[offMagic:]); m != encodingMagic {
		return 0, malformed("magic", offMagic, errBadMagic, fmt.Sprintf("%#08x, want %#08x", m, encodingMagic))
	}
	if v := be.Uint16(h[offVersion:]); v != encodingVersion {
		return 0, malformed("version", offVersion, errVersion, fmt.Sprintf("%d, this package reads %d", v, encodingVersion))
	}
	n := int(be.Uint16(h[offLength:]))
	if n < bodyFixedSize || n > maxEncodedSize-headerSize || (n-bodyFixedSize)%regionSize != 0 {
		return 0, malformed("length", offLength, errLength,
			fmt.Sprintf("body of %d bytes is not %d + a multiple of %d up to %d",
				n, bodyFixedSize, regionSize, maxEncodedSize-headerSize))
	}
	return n, nil
}

// decode decodes the encoding at the start of data and returns it with its
// length. Bytes after it are left for the caller.
func decode(data []byte) (Endpoint, int, error) {
	be := binary.BigEndian
	bodyLen, err := checkHeader(data)
	if err != nil {
		return Endpoint{}, 0, err
	}
	total := headerSize + bodyLen
	if len(data) < total {
		return Endpoint{}, 0, malformed("body", len(data), errTruncated,
			fmt.Sprintf("%d of %d bytes", len(data), total))
	}
	count := int(data[offRegionCount])
	if count > MaxRegions {
		return Endpoint{}, 0, malformed("region count", offRegionCount, ErrTooManyRegions,
			fmt.Sprintf("%d regions, at most %d", count, MaxRegions))
	}
	if want := bodyFixedSize + count*regionSize; bodyLen != want {
		return Endpoint{}, 0, malformed("length", offLength, errLength,
			fmt.Sprintf("body of %d bytes, %d regions need %d", bodyLen, count, want))
	}
	if r := be.Uint16(data[offReserved:]); r != 0 {
		return Endpoint{}, 0, malformed("reserved", offReserved, errReserved, fmt.Sprintf("%#x", r))
	}
	e := Endpoint{
		Transport:   Transport(data[offTransport]),
		MTU:         ctx.MTU(data[offMTU]),
		GIDIndex:    data[offGIDIndex],
		LID:         be.Uint16(data[offLID:]),
		QPN:         be.Uint32(data[offQPN:]),
		PSN:         be.Uint32(data[offPSN:]),
		QKey:        be.Uint32(data[offQKey:]),
		DCTNumber:   be.Uint32(data[offDCTNumber:]),
		DCAccessKey: be.Uint64(data[offDCAccessKey:]),
	}
	copy(e.GID[:], data[offGID:offGID+16])
	if count > 0 {
		e.Regions = make([]RemoteRegion, count)
		for i := range e.Regions {
			r := data[offRegions+i*regionSize:]
			e.Regions[i] = RemoteRegion{
				Address:   be.Uint64(r[regionOffAddress:]),
				Length:    be.Uint64(r[regionOffLength:]),
				RemoteKey: be.Uint32(r[regionOffRemoteKey:]),
				Access:    ctx.Access(be.Uint32(r[regionOffAccess:])),
			}
		}
	}
	if err := e.check(); err != nil {
		err.Op = opUnmarshal
		return Endpoint{}, 0, err
	}
	return e, total, nil
}

// writeEndpoint writes e's encoding to w in one call.
func writeEndpoint(w io.Writer, e Endpoint) error {
	b, err := e.MarshalBinary()
	if err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("endpoint: write: %w", err)
	}
	return nil
}

// readEndpoint reads one encoded endpoint from r: the header first, which it checks
// before reading on, so a hostile length never makes it read more than
// maxEncodedSize bytes. A stream that ends inside the endpoint is an error
// matching errTruncated and io.ErrUnexpectedEOF; one that ends before it
// starts returns io.EOF.
func readEndpoint(r io.Reader) (Endpoint, error) {
	var buf [maxEncodedSize]byte
	if _, err := io.ReadFull(r, buf[:headerSize]); err != nil {
		if err == io.ErrUnexpectedEOF {
			return Endpoint{}, fmt.Errorf("%w: %w", malformed("header", 0, errTruncated, "stream ended inside the header"), err)
		}
		return Endpoint{}, fmt.Errorf("endpoint: read header: %w", err)
	}
	bodyLen, herr := checkHeader(buf[:headerSize])
	if herr != nil {
		return Endpoint{}, herr
	}
	if _, err := io.ReadFull(r, buf[headerSize:headerSize+bodyLen]); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return Endpoint{}, fmt.Errorf("%w: %w", malformed("body", headerSize, errTruncated, "stream ended inside the body"), io.ErrUnexpectedEOF)
		}
		return Endpoint{}, fmt.Errorf("endpoint: read body: %w", err)
	}
	var e Endpoint
	if err := e.UnmarshalBinary(buf[:headerSize+bodyLen]); err != nil {
		return Endpoint{}, err
	}
	return e, nil
}
