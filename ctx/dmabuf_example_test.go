package ctx_test

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// Register memory exported as a dma-buf and write into it with RDMA. On
// hardware fd comes from the GPU driver (cuMemGetHandleForAddressRange,
// hsa_amd_portable_export_dmabuf); the software HCA takes a memfd in its
// place, and the bytes a peer writes show in any mapping of the memfd.
func ExampleProtectionDomain_RegisterDMABuf() {
	c, err := ctx.Open(ctx.Options{Provider: ctx.ProviderSoftware})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	pd := must(c.AllocProtectionDomain())

	// The "GPU memory": two pages of a memfd.
	fd := must(unix.MemfdCreate("gpu-stand-in", unix.MFD_CLOEXEC))
	check(unix.Ftruncate(fd, 8192))
	const iova = 0x7f00_0000_0000 // the address peers and SGEs use
	mr := must(pd.RegisterDMABuf(fd, 0, 8192, iova, ctx.AccessLocalWrite|ctx.AccessRemoteWrite|ctx.AccessRemoteRead))
	view := must(unix.Mmap(fd, 0, 8192, unix.PROT_READ, unix.MAP_SHARED)) // the host's own view
	defer unix.Munmap(view)
	check(unix.Close(fd)) // the registration keeps the buffer
	fmt.Printf("Addr %#x, Go bytes: %v\n", mr.Addr(), mr.Bytes() != nil)

	cqA := must(c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 16}))
	cqB := must(c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 16}))
	a := must(rc.New(pd, cqA, rc.Config{SendDepth: 8, MaxInline: 64}))
	b := must(rc.New(pd, cqB, rc.Config{SendDepth: 8}))
	check(a.Connect(b.Endpoint()))
	check(b.Connect(a.Endpoint()))
	poll := must(transport.NewPoller(cqA))
	check(poll.Add(a))

	st := must(a.Post(1, wqebuilder.Signaled))
	check(st.RdmaWrite(uint64(mr.Addr())+4096, mr.RKey()).Inline([]byte("written by RDMA")).FinishBlueFlame())
	for poll.Poll(1, func(wc *transport.Completion) { check(wc.Err()) }) == 0 {
	}
	fmt.Printf("%q\n", view[4096:4096+15])
	// Output:
	// Addr 0x7f0000000000, Go bytes: false
	// "written by RDMA"
}

func must[T any](v T, err error) T {
	check(err)
	return v
}

func check(err error) {
	if err != nil {
		panic(err)
	}
}
