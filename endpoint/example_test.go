package endpoint_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
)

// An endpoint encodes to a few dozen bytes and decodes back to the same
// value.
func ExampleEndpoint_MarshalBinary() {
	local := endpoint.Endpoint{
		Transport: endpoint.TransportRC,
		QPN:       0x1a2b,
		LID:       7,
		PSN:       0x4242,
		MTU:       ctx.MTU4096,
		Regions: []endpoint.RemoteRegion{
			{Address: 0x10000, Length: 1 << 20, RemoteKey: 0x1234, Access: ctx.AccessRemoteRead | ctx.AccessRemoteWrite},
		},
	}
	b, err := local.MarshalBinary()
	if err != nil {
		panic(err)
	}
	var remote endpoint.Endpoint
	if err := remote.UnmarshalBinary(b); err != nil {
		panic(err)
	}
	fmt.Println(len(b), "bytes")
	fmt.Println(remote)
	fmt.Println(remote.Regions[0])
	// Output:
	// 80 bytes
	// RC qpn=0x1a2b lid=7 gid=:: gid_index=0 psn=0x4242 mtu=4096 regions=1
	// [0x10000,+1048576) rkey=0x1234 RemoteWrite|RemoteRead
}

// Bytes from a peer are untrusted: every field is checked and a bad one is
// an error that names it.
func ExampleEndpoint_UnmarshalBinary_malformed() {
	b, _ := endpoint.Endpoint{Transport: endpoint.TransportUD, QPN: 5, QKey: 0x11111111, MTU: ctx.MTU2048}.MarshalBinary()
	b[16] = 0x01 // the high byte of the QPN: now 25 bits wide

	var e endpoint.Endpoint
	err := e.UnmarshalBinary(b)
	fmt.Println(err)
	var bad *endpoint.Error
	fmt.Println(errors.Is(err, endpoint.ErrMalformed), errors.As(err, &bad), bad.Field, bad.Offset)
	// Output:
	// endpoint: unmarshal: qpn at byte 16: value out of range: 0x1000005 exceeds 24 bits
	// true true qpn 16
}

// Two peers swap endpoints over a TCP connection. Each first proves to the
// other that it holds the same key; across hosts each would read the key
// from a file only it may read, or from the environment.
func ExampleExchange() {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	sec := endpoint.Security{Key: key}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	server := endpoint.Endpoint{Transport: endpoint.TransportRC, QPN: 0x100, PSN: 1, MTU: ctx.MTU1024}
	client := endpoint.Endpoint{Transport: endpoint.TransportRC, QPN: 0x200, PSN: 2, MTU: ctx.MTU1024}

	done := make(chan endpoint.Endpoint)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			panic(err)
		}
		defer conn.Close()
		remote, err := endpoint.Exchange(c, conn, endpoint.AcceptSide, server, sec)
		if err != nil {
			panic(err)
		}
		done <- remote
	}()

	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	remote, err := endpoint.Exchange(c, conn, endpoint.DialSide, client, sec)
	if err != nil {
		panic(err)
	}
	fmt.Printf("client reaches QPN %#x, server reaches QPN %#x\n", remote.QPN, (<-done).QPN)
	// Output:
	// client reaches QPN 0x100, server reaches QPN 0x200
}

// Three peers, each with one RC queue per peer: local[i][j] is rank i's
// queue for rank j, and after the mesh remote[i][j] is rank j's queue for
// rank i.
func ExampleMesh() {
	const n = 3
	local := make([][]endpoint.Endpoint, n)
	for i := range local {
		local[i] = make([]endpoint.Endpoint, n)
		for j := range local[i] {
			local[i][j] = endpoint.Endpoint{Transport: endpoint.TransportRC, QPN: uint32(0x100*(i+1) + j), MTU: ctx.MTU4096}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	remote, err := endpoint.Mesh(ctx, "127.0.0.1:0", local)
	if err != nil {
		panic(err)
	}
	for i := range remote {
		fmt.Printf("rank %d connects its queues to", i)
		for j := range remote[i] {
			if j != i {
				fmt.Printf(" %#x", remote[i][j].QPN)
			}
		}
		fmt.Println()
	}
	// Output:
	// rank 0 connects its queues to 0x200 0x300
	// rank 1 connects its queues to 0x101 0x301
	// rank 2 connects its queues to 0x102 0x202
}

// On separate hosts rank 0 listens and the others dial it; the dialers
// retry while the listener is not up yet. Every rank holds the same key,
// and no rank is sent anything before it has proved it holds it.
func ExampleDialMesh() {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	opts := endpoint.MeshOptions{Security: endpoint.Security{Key: key}}

	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dct := func(rank int) endpoint.Endpoint {
		return endpoint.Endpoint{Transport: endpoint.TransportDC, MTU: ctx.MTU4096,
			DCTNumber: uint32(0x40 + rank), DCAccessKey: 0xdc}
	}
	// Over DC one target serves every peer, so each rank offers it to all.
	offer := func(rank int) []endpoint.Endpoint { return []endpoint.Endpoint{dct(rank), dct(rank)} }

	listener, err := endpoint.ListenMesh(c, "127.0.0.1:0", 2, opts)
	if err != nil {
		panic(err)
	}
	go func() {
		if _, err := listener.Exchange(c, offer(0)); err != nil {
			panic(err)
		}
	}()
	remote, err := endpoint.DialMesh(c, listener.Addr().String(), 1, offer(1), opts)
	if err != nil {
		panic(err)
	}
	fmt.Printf("rank 1 reaches rank 0 at DCT %#x\n", remote[0].DCTNumber)
	// Output:
	// rank 1 reaches rank 0 at DCT 0x40
}
