// Package asyncevent numbers ctx's asynchronous event types as verbs does
// and says what object each event names. The numbers are those of
// libibverbs' enum ibv_event_type, which are the kernel's enum
// ib_event_type, the event_type of struct ib_uverbs_async_event_desc: the
// hardware provider (cgo/internal/verbs) reads events by them and the
// emulated kernel (cgo/emulate) writes them by them. cgo/internal/verbs
// checks the numbers against the installed verbs.h.
package asyncevent

import "github.com/mlx5kit/mlx5kit/ctx"

// Element is the kind of object an event names: what the element of
// struct ibv_async_event (and of ib_uverbs_async_event_desc) holds.
type Element uint8

// The elements of the events.
const (
	// ElementNone: a verbs number the package does not know.
	ElementNone Element = iota
	// ElementCQ: the CQ (CQ_ERR).
	ElementCQ
	// ElementQP: the QP (the QP_* events, COMM_EST, SQ_DRAINED,
	// PATH_MIG, PATH_MIG_ERR).
	ElementQP
	// ElementSRQ: the SRQ (SRQ_ERR, SRQ_LIMIT_REACHED).
	ElementSRQ
	// ElementPort: the port number (PORT_ACTIVE, PORT_ERR, LID_CHANGE,
	// PKEY_CHANGE, SM_CHANGE, CLIENT_REREGISTER, GID_CHANGE).
	ElementPort
	// ElementDevice: the device (DEVICE_FATAL). The kernel's descriptor
	// carries a port number there too; ctx names no object.
	ElementDevice
	// ElementWQ: a work queue, an ibv_wq (WQ_FATAL).
	ElementWQ
)

// events holds, at each verbs number, ctx's type and the element.
var events = [...]struct {
	typ  ctx.AsyncEventType
	elem Element
}{
	0:  {ctx.EventCQError, ElementCQ},            // IBV_EVENT_CQ_ERR
	1:  {ctx.EventQPFatal, ElementQP},            // IBV_EVENT_QP_FATAL
	2:  {ctx.EventQPRequestError, ElementQP},     // IBV_EVENT_QP_REQ_ERR
	3:  {ctx.EventQPAccessError, ElementQP},      // IBV_EVENT_QP_ACCESS_ERR
	4:  {ctx.EventCommEstablished, ElementQP},    // IBV_EVENT_COMM_EST
	5:  {ctx.EventSQDrained, ElementQP},          // IBV_EVENT_SQ_DRAINED
	6:  {ctx.EventPathMigrated, ElementQP},       // IBV_EVENT_PATH_MIG
	7:  {ctx.EventPathMigrationError, ElementQP}, // IBV_EVENT_PATH_MIG_ERR
	8:  {ctx.EventDeviceFatal, ElementDevice},    // IBV_EVENT_DEVICE_FATAL
	9:  {ctx.EventPortActive, ElementPort},       // IBV_EVENT_PORT_ACTIVE
	10: {ctx.EventPortError, ElementPort},        // IBV_EVENT_PORT_ERR
	11: {ctx.EventLIDChange, ElementPort},        // IBV_EVENT_LID_CHANGE
	12: {ctx.EventPKeyChange, ElementPort},       // IBV_EVENT_PKEY_CHANGE
	13: {ctx.EventSMChange, ElementPort},         // IBV_EVENT_SM_CHANGE
	14: {ctx.EventSRQError, ElementSRQ},          // IBV_EVENT_SRQ_ERR
	15: {ctx.EventSRQLimitReached, ElementSRQ},   // IBV_EVENT_SRQ_LIMIT_REACHED
	16: {ctx.EventQPLastWQEReached, ElementQP},   // IBV_EVENT_QP_LAST_WQE_REACHED
	17: {ctx.EventClientReregister, ElementPort}, // IBV_EVENT_CLIENT_REREGISTER
	18: {ctx.EventGIDChange, ElementPort},        // IBV_EVENT_GID_CHANGE
	19: {ctx.EventWQFatal, ElementWQ},            // IBV_EVENT_WQ_FATAL
}

// Count is the number of verbs event numbers the package knows: 0 to
// Count-1, every value of enum ibv_event_type.
const Count = len(events)

// Type returns ctx's type of the verbs event number n, 0 for a number
// newer than the package.
func Type(n uint32) ctx.AsyncEventType {
	if n < uint32(Count) {
		return events[n].typ
	}
	return 0
}

// ElementOf returns the element of the verbs event number n, ElementNone
// for a number newer than the package.
func ElementOf(n uint32) Element {
	if n < uint32(Count) {
		return events[n].elem
	}
	return ElementNone
}

// Verbs returns the verbs event number of ctx's type t; ok is false for a
// type that has none (0, or one past the last).
func Verbs(t ctx.AsyncEventType) (n uint32, ok bool) {
	for i, e := range events {
		if e.typ == t && t != 0 {
			return uint32(i), true
		}
	}
	return 0, false
}
