// Package ctx holds the control-plane objects of mlx5kit (Context,
// ProtectionDomain, MemoryRegion, buffers) and the provider seam: the Go
// twins of mlx5dv_qp, mlx5dv_cq and mlx5dv_srq that the hardware provider
// (package cgo) and the software HCA (package sim) both fill in. The data
// plane reads only these descriptors.
package ctx
