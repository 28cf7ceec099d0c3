//go:build cgo && linux

package verbs_test

import (
	"errors"
	"fmt"
	"log"
	"syscall"

	"github.com/mlx5kit/mlx5kit/cgo/internal/verbs"
	"github.com/mlx5kit/mlx5kit/ctx"
)

// A failed verb names itself and its errno; errors.Is sees both the errno
// and the ctx sentinel.
func ExampleVerbError() {
	_, err := verbs.Open("no_such_device")
	var ve *verbs.VerbError
	if errors.As(err, &ve) {
		fmt.Println(ve.Verb, ve.Errno == syscall.ENODEV)
	}
	fmt.Println(errors.Is(err, ctx.ErrNotFound), errors.Is(err, syscall.ENODEV))
	// Output:
	// ibv_get_device_list true
	// true true
}

// Opening the first mlx5 device and creating what an RC connection needs,
// directly with the hardware types. Most programs go through ctx.Open
// instead, which uses the same provider.
func ExampleOpen() {
	d, err := verbs.Open("") // the first mlx5 device
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close() // destroys whatever is still open, in order

	pd, err := d.AllocProtectionDomain()
	if err != nil {
		log.Fatal(err)
	}
	cq, err := d.CreateCompletionQueue(verbs.CQConfig{CompletionQueueConfig: ctx.CompletionQueueConfig{Depth: 256}})
	if err != nil {
		log.Fatal(err)
	}
	qp, err := pd.CreateQueuePair(verbs.QPConfig{
		Type:   ctx.QPTypeRC,
		SendCQ: cq,
		Caps:   ctx.QueuePairCaps{SendDepth: 128, RecvDepth: 128, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 64},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: ctx.AccessLocalWrite | ctx.AccessRemoteWrite}); err != nil {
		log.Fatal(err)
	}
	desc := qp.Descriptor() // the rings the data plane writes
	fmt.Println(desc.QPN != 0, desc.SQ.Stride)
}
