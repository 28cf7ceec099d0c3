// Package completion turns completion-queue entries into errors a program can
// test, and waits for completions without spinning.
//
// It owns two things that sit on top of a poller (package monocq): the
// [Error] type of a failed work request, and event mode ([Notifier]): a
// completion channel, arming, a blocking wait bounded by a timeout or a
// context, and an iterator over completions. It creates no queues and posts
// nothing; transports and channels use it.
//
// # Errors
//
// An error CQE becomes an [*Error] (see [FromCQE] and [Check]) that carries
// the work-completion status as verbs names it (REM_ACCESS_ERR, …), the mlx5
// syndrome and vendor syndrome, the CQE opcode and the send opcode of the
// failed WQE, the QPN and the wqe_counter, and the work request id when the
// caller knows it. It formats them on one line and matches, with errors.Is,
// the sentinel of its status ([ErrRemoteAccess], [ErrFlushed], …) as well as
// monocq.ErrCompletion; errors.As recovers the *Error from any wrapping.
//
// # Event mode
//
// A [Notifier] pairs a completion queue created with an event channel
// (ctx.CompletionQueueConfig.EventChannel) with its poller. [Notifier.Wait]
// arms the CQ, polls once more to close the race between the last empty poll
// and the arm, and then sleeps in the Go runtime's network poller until the
// device raises the event, the context is done or the timeout passes: no
// thread is blocked and no CPU is burnt. [Completions] is an iterator over
// a transport's Poller (rc, dc or ud) that polls when there is work and
// waits when there is none, so a consumer written against it sees exactly
// the completions a busy poll would, in the same order, each with its work
// request retired.
package completion
