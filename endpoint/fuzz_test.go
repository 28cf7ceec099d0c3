package endpoint

import (
	"bytes"
	"errors"
	"testing"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// FuzzUnmarshal feeds arbitrary bytes to the decoder. It must never panic,
// every failure must match ErrMalformed, and every success must be a valid
// endpoint that encodes back to exactly the input (the encoding is
// canonical) and that the stream reader decodes the same way.
func FuzzUnmarshal(f *testing.F) {
	// Small seeds keep the minimizer quick: it works byte by byte, so a
	// 1.6 KB input with 64 regions stalls the fuzzer for its whole
	// minimization budget.
	dc := sampleDC()
	dc.Regions = dc.Regions[:2]
	for _, e := range []Endpoint{sampleRC(), sampleUD(), dc} {
		b, err := e.MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte("MXEP"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var e Endpoint
		err := e.UnmarshalBinary(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error does not match ErrMalformed: %v", err)
			}
			var de *Error
			if !errors.As(err, &de) || de.Err == nil {
				t.Fatalf("error is not an *Error with a sentinel: %v", err)
			}
			if !e.Equal(Endpoint{}) {
				t.Fatalf("failed decode changed the receiver: %v", e)
			}
			return
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("decoded endpoint does not validate: %v", err)
		}
		again, err := e.MarshalBinary()
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if !bytes.Equal(again, data) {
			t.Fatalf("not canonical:\n in  %x\n out %x", data, again)
		}
		s, err := readEndpoint(bytes.NewReader(data))
		if err != nil || !s.Equal(e) {
			t.Fatalf("stream read differs: %v %v", s, err)
		}
	})
}

// FuzzRoundTrip builds endpoints from arbitrary field values. Whatever
// Validate accepts must survive encode and decode unchanged; whatever it
// rejects must not encode.
func FuzzRoundTrip(f *testing.F) {
	f.Add(uint8(1), uint32(0xabcdef), uint16(7), []byte{0xfe, 0x80}, uint8(0), uint32(5), uint8(5), uint32(0), uint64(0), uint32(0), uint8(1), uint64(0x1000), uint64(4096), uint32(9), uint32(6))
	f.Add(uint8(2), uint32(1), uint16(0), []byte{}, uint8(1), uint32(0), uint8(4), uint32(0), uint64(0), uint32(0x11111111), uint8(0), uint64(0), uint64(0), uint32(0), uint32(0))
	f.Add(uint8(3), uint32(0), uint16(1), []byte{1, 2, 3}, uint8(2), uint32(0xffffff), uint8(1), uint32(0xffffff), uint64(42), uint32(0), uint8(64), uint64(1<<40), uint64(8), uint32(1), uint32(15))
	f.Add(uint8(9), uint32(1<<24), uint16(0), []byte{}, uint8(0), uint32(1<<24), uint8(7), uint32(1<<25), uint64(1), uint32(1), uint8(65), ^uint64(0), uint64(2), uint32(0), uint32(0x80))
	f.Fuzz(func(t *testing.T, transport uint8, qpn uint32, lid uint16, gid []byte, gidIndex uint8, psn uint32,
		mtu uint8, dct uint32, dcKey uint64, qkey uint32, regions uint8, addr, length uint64, rkey, access uint32) {
		e := Endpoint{Transport: Transport(transport), QPN: qpn, LID: lid, GIDIndex: gidIndex, PSN: psn,
			MTU: ctx.MTU(mtu), DCTNumber: dct, DCAccessKey: dcKey, QKey: qkey}
		copy(e.GID[:], gid)
		for i := range int(regions) {
			e.Regions = append(e.Regions, RemoteRegion{Address: addr + uint64(i), Length: length, RemoteKey: rkey + uint32(i), Access: ctx.Access(access)})
		}
		b, err := e.MarshalBinary()
		if verr := e.Validate(); verr != nil {
			if err == nil || !errors.Is(err, ctx.ErrInvalidArgument) {
				t.Fatalf("Validate says %v but MarshalBinary says %v", verr, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("valid endpoint does not encode: %v", err)
		}
		if len(b) != e.encodedSize() {
			t.Fatalf("encoded %d bytes, encodedSize says %d", len(b), e.encodedSize())
		}
		var got Endpoint
		if err := got.UnmarshalBinary(b); err != nil {
			t.Fatalf("decode of own encoding: %v", err)
		}
		if !got.Equal(e) {
			t.Fatalf("round trip changed the endpoint:\n in  %v\n out %v", e, got)
		}
	})
}
