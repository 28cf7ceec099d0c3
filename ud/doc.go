// Package ud is the unreliable-datagram transport of mlx5kit: queue pairs that
// send to any peer through an address vector, a remote QPN and a qkey, and
// receive with 40 bytes of GRH space in front of every payload.
//
// It is being built; until this comment changes the package exports nothing.
package ud
