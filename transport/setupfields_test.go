package transport

import (
	"reflect"
	"testing"
)

// TestSetupResetCoversEveryField: setup rebuilds a queue reset to the same
// QP field by field, leaving the words a Close on another goroutine reads
// (TestCloseWhileReset in package rc); these are the fields it sets or
// keeps. A new field of Queue must be added to its Reset branch, then here.
func TestSetupResetCoversEveryField(t *testing.T) {
	known := map[string]bool{
		// Set as for a new queue.
		"sq": true, "state": true, "qpn": true, "rq": true, "srq": true, "recv": true,
		"dead": true, "refusal": true, "errSend": true, "errRecv": true, "errNoRQ": true,
		// Unchanged by a Reset, and read by Close: not written.
		"qp": true, "typ": true, "transport": true,
		// Kept across a Reset.
		"unmatched": true, "counts": true, "closer": true,
	}
	typ := reflect.TypeFor[Queue]()
	for i := range typ.NumField() {
		if name := typ.Field(i).Name; !known[name] {
			t.Errorf("Queue.%s: set or keep it in setup's Reset branch, and list it here", name)
		}
	}
	if typ.NumField() != len(known) {
		t.Errorf("Queue has %d fields, the list %d", typ.NumField(), len(known))
	}
}
