// Command inlinecheck uses each polling form of monocq the way a transport
// does. TestInlining builds it with -gcflags=-m and -S and checks that the
// per-CQE code is inlined into these functions.
package main

import (
	"fmt"
	"os"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/monocq"
)

type queue struct {
	completions uint64
	bytes       uint64
}

var (
	table  monocq.Table[queue]
	counts [8]uint64
)

// Cursor drives Ready, Next and Release itself.
func Cursor(cq *monocq.CQ) (n int) {
	cq.Ready(64)
	for c := cq.Next(); c != nil; c = cq.Next() {
		if q := table.Lookup(c.QPN()); q != nil {
			q.completions++
			q.bytes += uint64(c.ByteCount())
		}
		counts[c.WQECounter()&7]++
		n++
	}
	cq.Release()
	return n
}

// PollLiteral passes a function literal to Poll.
func PollLiteral(cq *monocq.CQ) int {
	return cq.Poll(64, func(c *monocq.CQE) {
		if q := table.Lookup(c.QPN()); q != nil {
			q.completions++
			q.bytes += uint64(c.ByteCount())
		}
	})
}

// PollOne polls one CQE at a time, the latency loop's form: Poll takes the
// one-CQE path that makes no call.
func PollOne(cq *monocq.CQ) int {
	return cq.Poll(1, func(c *monocq.CQE) {
		counts[c.WQECounter()&7]++
	})
}

// RangeAll ranges over All.
func RangeAll(cq *monocq.CQ) (n int) {
	for c := range cq.All(64) {
		if q := table.Lookup(c.QPN()); q != nil {
			q.completions++
			q.bytes += uint64(c.ByteCount())
		}
		n++
	}
	return n
}

func main() {
	var ring [4 * 64]byte
	var dbrec [8]byte
	for i := 0; i < 4; i++ {
		ring[i*64+63] = 0xf0
	}
	base := unsafe.Pointer(&ring[0])
	base = unsafe.Add(base, (64-uintptr(base)%64)%64)
	cq, err := monocq.New(monocq.Config{Buf: base, CQECnt: 2, CQESize: 64, DBRec: unsafe.Pointer(&dbrec[0])})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(Cursor(cq), PollLiteral(cq), PollOne(cq), RangeAll(cq))
}
