//go:build cgo && linux

package emulate

import (
	"encoding/binary"
	"strconv"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Completion events. A CQ created with a completion channel is armed by
// the library (ibv_req_notify_cq writes the arm word of the CQ's doorbell
// record and rings the UAR); when the model raises the event it calls
// cqEvents.post, which writes one struct ib_uverbs_comp_event_desc (the
// CQ's user handle, which libibverbs takes for its struct ibv_cq) into the
// channel, as ib_uverbs_comp_handler queues one. ibv_get_cq_event reads
// it from the channel descriptor with no interposing.

// cqEvents is the completion event source of one CQ.
type cqEvents struct {
	file    *eventFile
	cookie  uint64
	written atomic.Uint32
}

// post writes one completion event into the channel; it runs on the
// model's engine.
func (e *cqEvents) post() {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], e.cookie)
	if e.file.writeRecord(b[:]) {
		e.written.Add(1)
	}
}

// writeRecord writes one whole event record into the descriptor and
// reports whether it did. A descriptor already closed, or full (the write
// end does not block), loses the event, as a kernel drops events for a
// closed file.
func (f *eventFile) writeRecord(rec []byte) bool {
	f.writeMu.Lock()
	defer f.writeMu.Unlock()
	if f.writeFD < 0 {
		return false
	}
	n, err := unix.Write(f.writeFD, rec)
	return err == nil && n == len(rec)
}

// reported takes the CQ's unread events out of its channel and returns
// how many were written and read: DESTROY_CQ's comp_events_reported. nil
// (a CQ without a channel) reports none. The CQ must be gone from the
// model already, so that nothing is posted meanwhile.
func (e *cqEvents) reported() uint32 {
	if e == nil {
		return 0
	}
	return e.written.Load() - e.file.removeRecords(8, func(rec []byte) bool {
		return binary.NativeEndian.Uint64(rec) == e.cookie
	})
}

// removeRecords takes the records of size bytes that match out of the
// descriptor, keeping the others in order, and returns how many it took.
// It reads through a second, non-blocking descriptor of the pipe
// (/proc/self/fd), so that the caller's descriptor keeps its flags and an
// empty pipe does not block.
func (f *eventFile) removeRecords(size int, match func(rec []byte) bool) uint32 {
	f.writeMu.Lock()
	defer f.writeMu.Unlock()
	if f.writeFD < 0 {
		return 0
	}
	rfd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(f.fd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	defer unix.Close(rfd)
	var keep []byte
	var removed uint32
	buf := make([]byte, 4096)
	for {
		n, err := unix.Read(rfd, buf)
		if err != nil || n <= 0 {
			break
		}
		// Records are written whole (below PIPE_BUF) and read in
		// multiples of their size (a power of two dividing the buffer)
		// here, so they do not straddle reads.
		for i := 0; i+size <= n; i += size {
			if match(buf[i : i+size]) {
				removed++
			} else {
				keep = append(keep, buf[i:i+size]...)
			}
		}
	}
	if len(keep) > 0 {
		_, _ = unix.Write(f.writeFD, keep)
	}
	return removed
}
