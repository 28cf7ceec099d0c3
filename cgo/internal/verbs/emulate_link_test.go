package verbs_test

// The emulated uverbs kernel is linked into the test binary, off unless
// MLX5KIT_EMULATE=1: with it (and MLX5KIT_PROVIDER=mlx5) the hardware
// tests run through rdma-core on the software HCA (docs/hardware.md).
import _ "github.com/mlx5kit/mlx5kit/cgo/emulate"
