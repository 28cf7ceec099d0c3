package monocq_test

import (
	"testing"

	"github.com/mlx5kit/mlx5kit/monocq"
)

// A QPN wider than 24 bits names no queue: Lookup must not return the
// queue of its low 24 bits.
func TestLookupWideQPN(t *testing.T) {
	var tb monocq.Table[int]
	v := 1
	if err := tb.Register(0x100, &v); err != nil {
		t.Fatal(err)
	}
	if got := tb.Lookup(0x1000100); got != nil {
		t.Fatalf("Lookup(0x1000100) = the queue of QPN 0x100, want nil")
	}
	if got := tb.Lookup(0x100); got != &v {
		t.Fatalf("Lookup(0x100) = %p, want %p", got, &v)
	}
}
