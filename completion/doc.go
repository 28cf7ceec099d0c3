// Package completion waits for completions without spinning.
//
// It owns event mode ([Notifier]), which sits on top of a poller (package
// monocq): a completion channel, arming, a blocking wait bounded by a
// timeout or a context, and an iterator over completions. It creates no
// queues and posts nothing; transports and channels use it. The error of a
// failed work request, with its verbs status and the sentinels errors.Is
// matches, is monocq.CompletionError.
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
