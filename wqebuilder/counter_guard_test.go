package wqebuilder_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// guardedTail maps whole pages for n bytes between two PROT_NONE pages and
// returns the accessible pages and the last n bytes of them.
func guardedTail(t *testing.T, n int) (pages, tail []byte) {
	t.Helper()
	ps := os.Getpagesize()
	np := (n + ps - 1) / ps
	all, err := unix.Mmap(-1, 0, (np+2)*ps, unix.PROT_NONE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(all) })
	pages = all[ps : (np+1)*ps]
	if err := unix.Mprotect(pages, unix.PROT_READ|unix.PROT_WRITE); err != nil {
		t.Fatal(err)
	}
	return pages, pages[len(pages)-n:]
}

// TestCompleteRefusesCounterInsideWQE completes with the index of a WQEBB
// that lies inside a WQE in flight, as a corrupt or duplicated CQE could
// name it: nothing is retired, and the real counter still works.
func TestCompleteRefusesCounterInsideWQE(t *testing.T) {
	pages, ring := guardedTail(t, 16*64)
	_, dbrec := guardedTail(t, 8)
	_, reg := guardedTail(t, 512)
	for i := range pages {
		pages[i] = 0xff // every ds byte in the ring says 63 segments
	}
	q, err := wqebuilder.New(wqebuilder.Config{
		Buf: unsafe.Pointer(&ring[0]), WQECnt: 16, QPN: 0x42,
		DBRec: unsafe.Pointer(&dbrec[0]), BlueFlame: unsafe.Pointer(&reg[0]), BlueFlameSize: 256,
		MaxInline: 200, MaxSGE: 4,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Three WQEs of 1, 4 and 2 WQEBBs; the middle one carries inline bytes
	// that look like a control segment with a large ds.
	fake := make([]byte, 180)
	for i := range fake {
		fake[i] = 0x3f
	}
	if err := q.Begin(1, wqebuilder.Signaled).Nop().Finish(); err != nil {
		t.Fatal(err)
	}
	if err := q.Begin(2, 0).Send().Inline(fake).Finish(); err != nil {
		t.Fatal(err)
	}
	if err := q.Begin(3, wqebuilder.Signaled).Send().SGE(1, 1, 1).SGE(2, 2, 2).SGE(3, 3, 3).SGE(4, 4, 4).Finish(); err != nil {
		t.Fatal(err)
	}
	if q.ProducerIndex() != 7 {
		t.Fatalf("producer index %d, want 7", q.ProducerIndex())
	}
	before := bytes.Clone(ring)
	for _, c := range []uint16{2, 3, 4, 6, 7, 100} {
		if wrid, ok := q.Complete(c); ok {
			t.Fatalf("Complete(%d) = %d, true: counter %d starts no WQE in flight", c, wrid, c)
		}
		if q.ConsumerIndex() != 0 {
			t.Fatalf("Complete(%d) moved the consumer index to %d", c, q.ConsumerIndex())
		}
	}
	if !bytes.Equal(before, ring) {
		t.Fatal("Complete changed the ring")
	}
	if wrid, ok := q.Complete(5); !ok || wrid != 3 || q.ConsumerIndex() != 7 {
		t.Fatalf("Complete(5) = %d, %v, consumer index %d; want 3, true, 7", wrid, ok, q.ConsumerIndex())
	}
	if _, ok := q.Complete(5); ok {
		t.Fatal("a second Complete(5) retired something")
	}
	if binary.BigEndian.Uint32(ring[64+4:]) != 0x42<<8|uint32(1+(4+180+15)/16) {
		t.Fatal("the inline WQE's control segment is not where the test expects it")
	}
}

// TestFinishTwiceWholeRingWQE finishes twice a WQE that takes the whole
// ring: the producer index comes back to the same slot, and the second
// Finish must still be refused rather than post a second WQE over the first.
func TestFinishTwiceWholeRingWQE(t *testing.T) {
	_, ring := guardedTail(t, 2*64)
	_, dbrec := guardedTail(t, 8)
	_, reg := guardedTail(t, 8)
	q, err := wqebuilder.New(wqebuilder.Config{
		Buf: unsafe.Pointer(&ring[0]), WQECnt: 2, QPN: 7,
		DBRec: unsafe.Pointer(&dbrec[0]), BlueFlame: unsafe.Pointer(&reg[0]),
		MaxSGE: 6, MaxWQEBBs: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	st := q.Begin(9, wqebuilder.Signaled).Send().SGE(1, 1, 1).SGE(2, 2, 2).SGE(3, 3, 3).SGE(4, 4, 4)
	if err := st.Finish(); err != nil {
		t.Fatal(err)
	}
	before := bytes.Clone(ring)
	if err := st.Finish(); err == nil {
		t.Fatalf("second Finish accepted: producer index %d, consumer index %d in a ring of 2", q.ProducerIndex(), q.ConsumerIndex())
	}
	if q.ProducerIndex() != 2 || !bytes.Equal(before, ring) {
		t.Fatalf("refused Finish moved the producer index to %d or changed the ring", q.ProducerIndex())
	}
}

// TestFullQueueLargestWQE builds the largest WQE there is (DC address,
// masked 64-bit compare-and-swap, result) on a full queue with the smallest
// MaxWQEBBs: every segment goes to the queue's scratch area, and the stage's
// pointers must stay inside it (under -race, checkptr stops the program on
// a pointer one past a Go allocation).
func TestFullQueueLargestWQE(t *testing.T) {
	_, ring := guardedTail(t, 2*64)
	_, dbrec := guardedTail(t, 8)
	_, reg := guardedTail(t, 8)
	q, err := wqebuilder.New(wqebuilder.Config{
		Buf: unsafe.Pointer(&ring[0]), WQECnt: 2, QPN: 7,
		DBRec: unsafe.Pointer(&dbrec[0]), BlueFlame: unsafe.Pointer(&reg[0]), MaxWQEBBs: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	var av [48]byte
	if err := q.Begin(1, 0).DC(&av, 9, 9).MaskedCS64(1, 2, 3, 4, 5, 6).Result(7, 8).Finish(); err != nil {
		t.Fatal(err)
	}
	before := bytes.Clone(ring)
	err = q.Begin(2, 0).DC(&av, 9, 9).MaskedCS64(1, 2, 3, 4, 5, 6).Result(7, 8).Finish()
	if !errors.Is(err, wqebuilder.ErrQueueFull) {
		t.Fatalf("Finish on a full queue: %v", err)
	}
	if !bytes.Equal(before, ring) {
		t.Fatal("a WQE begun on a full queue wrote to the ring")
	}
}
