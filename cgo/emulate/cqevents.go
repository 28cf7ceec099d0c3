//go:build cgo && linux

package emulate

import (
	"encoding/binary"
	"strconv"

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
	file   *eventFile
	cookie uint64
	tally  eventTally
}

// post writes one completion event into the channel; it runs on the
// model's engine.
func (e *cqEvents) post() {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], e.cookie)
	e.file.writeRecord(b[:], &e.tally)
}

// reported takes the CQ's unread events out of its channel and returns
// how many were read: DESTROY_CQ's comp_events_reported. nil (a CQ
// without a channel) reports none.
func (e *cqEvents) reported() uint32 {
	if e == nil {
		return 0
	}
	return e.file.reported(&e.tally)
}

// eventTally counts the records one object wrote into an event
// descriptor (under the descriptor's writeMu): written, and dropped,
// those taken out or discarded unread. The kernel links each queued event
// to its object, so what it reports for an object is what was read of
// that object's events, whatever user handle other objects share.
type eventTally struct {
	written, dropped uint32
}

// recordSize is the size of the descriptor's event records.
func (f *eventFile) recordSize() int {
	if f.comp {
		return 8
	}
	return asyncRecordSize
}

// writeRecord writes one whole event record of w (nil for a record of no
// object, a port event) into the descriptor and reports whether it did. A
// descriptor already closed, or full (the write end does not block),
// loses the event, as a kernel drops events for a closed file.
func (f *eventFile) writeRecord(rec []byte, w *eventTally) bool {
	f.writeMu.Lock()
	defer f.writeMu.Unlock()
	if f.writeFD < 0 {
		return false
	}
	n, err := unix.Write(f.writeFD, rec)
	if err != nil || n != len(rec) {
		return false
	}
	f.writers = append(f.writers, w)
	if w != nil {
		w.written++
	}
	if len(f.writers) >= f.trimAt {
		f.trimWriters()
		f.trimAt = 2*len(f.writers) + 256
	}
	return true
}

// unreadRecords returns how many whole records the pipe holds (FIONREAD,
// TIOCINQ, answers for either end of a pipe); -1 if it cannot tell.
func (f *eventFile) unreadRecords() int {
	n, err := unix.IoctlGetInt(f.writeFD, unix.TIOCINQ)
	if err != nil {
		return -1
	}
	return n / f.recordSize()
}

// trimWriters forgets the writers of the records already read: the
// unread records are the last ones written.
func (f *eventFile) trimWriters() {
	if n := f.unreadRecords(); n >= 0 && n < len(f.writers) {
		f.writers = append([]*eventTally(nil), f.writers[len(f.writers)-n:]...)
	}
}

// discardUnread counts the unread records as dropped by their writers
// (ib_uverbs_free_event_queue unlinks them from their objects when the
// descriptor closes); the caller then forgets the write end.
func (f *eventFile) discardUnread() {
	n := f.unreadRecords()
	if n < 0 || n > len(f.writers) {
		n = len(f.writers)
	}
	for _, w := range f.writers[len(f.writers)-n:] {
		if w != nil {
			w.dropped++
		}
	}
	f.writers = nil
}

// reported takes w's unread records out of the descriptor and returns how
// many of w's records were read: DESTROY_CQ's comp_events_reported and
// the destroys' events_reported (ib_uverbs_release_ucq,
// ib_uverbs_release_uevent). The object must be gone from the model
// already, so that nothing of it is posted meanwhile.
func (f *eventFile) reported(w *eventTally) uint32 {
	f.writeMu.Lock()
	defer f.writeMu.Unlock()
	if f.writeFD >= 0 {
		f.removeRecords(w)
	}
	return w.written - w.dropped
}

// readUnread reads every unread byte out of the descriptor (writeMu
// held). It reads through a second, non-blocking descriptor of the pipe
// (/proc/self/fd), so that the caller's descriptor keeps its flags and an
// empty pipe does not block.
func (f *eventFile) readUnread() []byte {
	rfd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(f.writeFD), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(rfd)
	var data []byte
	buf := make([]byte, 4096)
	for {
		n, err := unix.Read(rfd, buf)
		if err != nil || n <= 0 {
			break
		}
		data = append(data, buf[:n]...)
	}
	return data
}

// removeRecords takes w's records out of the descriptor, keeping the
// others in order. The records read are the last ones written, which
// names their writers.
func (f *eventFile) removeRecords(w *eventTally) {
	size := f.recordSize()
	data := f.readUnread()
	// Records are written whole (below PIPE_BUF) and read from the
	// front: the bytes of one partly read there are not a record.
	count := len(data) / size
	data = data[len(data)-count*size:]
	writers := make([]*eventTally, count)
	if m := min(count, len(f.writers)); m > 0 {
		copy(writers[count-m:], f.writers[len(f.writers)-m:])
	}
	var keep []byte
	var kept []*eventTally
	for i := range count {
		if writers[i] == w && w != nil {
			w.dropped++
			continue
		}
		keep = append(keep, data[i*size:(i+1)*size]...)
		kept = append(kept, writers[i])
	}
	f.writers = kept
	if len(keep) > 0 {
		_, _ = unix.Write(f.writeFD, keep)
	}
}
