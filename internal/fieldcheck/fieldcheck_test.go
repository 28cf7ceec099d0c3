package fieldcheck

import (
	"errors"
	"testing"
)

func TestCheck(t *testing.T) {
	sentinel := errors.New("sentinel")
	if err := Check(sentinel, Field{"a", 0, 0, 1}, Field{"b", 7, 1, 7}); err != nil {
		t.Fatalf("in range: %v", err)
	}
	err := Check(sentinel, Field{"a", 1, 0, 1}, Field{"SL", 16, 0, 15}, Field{"c", 9, 0, 1})
	if !errors.Is(err, sentinel) || err.Error() != "SL 16 out of range 0..15: sentinel" {
		t.Fatalf("got %v, want the SL field named and the sentinel wrapped", err)
	}
	if err := Check(sentinel, Field{"port", 0, 1, 2}); err == nil || !errors.Is(err, sentinel) {
		t.Fatalf("below the minimum: got %v", err)
	}
}
