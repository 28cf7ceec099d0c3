package provider

// SRQLimiter is implemented by an SRQ that has the SRQ limit
// (ibv_modify_srq / ibv_query_srq with IBV_SRQ_LIMIT).
// ctx.SharedReceiveQueue.ArmLimit fails with ctx.ErrNotSupported on a
// provider whose SRQ does not implement it.
type SRQLimiter interface {
	// ArmLimit arms the limit (0 disarms): the device raises
	// EventSRQLimitReached once when the posted WQEs drop below it, and
	// disarms.
	ArmLimit(limit uint32) error
	// Limit returns the armed limit, 0 when disarmed.
	Limit() (uint32, error)
}
