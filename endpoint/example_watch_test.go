package endpoint_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/mlx5kit/mlx5kit/endpoint"
)

// A peer that has gone ends the wait of a context from WatchConn: here
// the peer closes the connection, as the kernel does for a process that
// exits or is killed.
func ExampleWatchConn() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()
	go func() {
		peer, err := ln.Accept()
		if err == nil {
			peer.Close()
		}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	watched, stop, err := endpoint.WatchConn(context.Background(), conn, 10*time.Millisecond)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	<-watched.Done() // a channel's Receive(watched, …) ends here too
	fmt.Println(errors.Is(context.Cause(watched), endpoint.ErrPeerGone))
	// Output: true
}
