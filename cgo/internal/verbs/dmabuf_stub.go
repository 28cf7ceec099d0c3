//go:build !cgo || !linux

package verbs

import "github.com/mlx5kit/mlx5kit/ctx"

// ProtectionDomain stands for a struct ibv_pd; in this build none can be
// allocated.
type ProtectionDomain struct{}

// MemoryRegion stands for a struct ibv_mr; in this build none can be
// registered.
type MemoryRegion struct{}

// RegisterDMABuf returns ErrUnavailable, which wraps ctx.ErrNotSupported.
func (pd *ProtectionDomain) RegisterDMABuf(fd int, offset, length, iova uint64, access ctx.Access) (*MemoryRegion, error) {
	return nil, ErrUnavailable
}
