package endpoint_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mlx5kit/mlx5kit/endpoint"
)

// Three ranks swap endpoints with a MeshWatch each (here all in one
// process; normally each rank is a process of its own). When rank 2
// leaves, as its exit would, rank 1, which has no connection to it, learns
// it through rank 0.
func ExampleMeshWatch() {
	key := []byte("the mesh's pre-shared key, 16+ bytes")
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Rank j's endpoint for rank i (made by a channel.PreparedMulti or by
	// hand for the raw rings).
	made := func(j, i int) endpoint.Endpoint {
		return endpoint.Endpoint{Transport: endpoint.TransportRC, QPN: uint32(16*j + i + 1), LID: uint16(j + 1), MTU: 5}
	}
	local := func(j int) []endpoint.Endpoint {
		var row []endpoint.Endpoint
		for i := range 3 {
			row = append(row, made(j, i))
		}
		return row
	}
	var watches [3]endpoint.MeshWatch
	for j := range watches {
		watches[j].Interval = 10 * time.Millisecond
		defer watches[j].Close()
	}
	l, err := endpoint.ListenMesh(c, "127.0.0.1:0", 3, endpoint.MeshOptions{Security: endpoint.Security{Key: key}, Watch: &watches[0]})
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan error, 2)
	for j := 1; j < 3; j++ {
		go func() {
			opts := endpoint.MeshOptions{Security: endpoint.Security{Key: key}, Watch: &watches[j]}
			_, err := endpoint.DialMesh(c, l.Addr().String(), j, local(j), opts)
			done <- err
		}()
	}
	if _, err := l.Exchange(c, local(0)); err != nil {
		fmt.Println(err)
		return
	}
	for range 2 {
		if err := <-done; err != nil {
			fmt.Println(err)
			return
		}
	}

	watched, stop := watches[1].Context(c) // give it to rank 1's waits
	defer stop()
	watches[2].Close() // rank 2 leaves
	<-watched.Done()
	fmt.Println(errors.Is(context.Cause(watched), endpoint.ErrPeerGone))
	fmt.Println(context.Cause(watched))
	// Output:
	// true
	// rank 0 says "rank 2 is gone": the peer closed its connection: it exited or was killed
}
