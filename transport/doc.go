// Package transport is the data-plane machinery that packages rc, dc and ud
// share: the Queue that binds a created queue pair's send ring (a
// wqebuilder.SendQueue), its receive ring or shared receive queue and its
// data-plane state; the Dispatcher that routes a completion queue's CQEs to
// the queue pairs added to it by QPN; the decoded Completion and its errors;
// and the GRH parsing of UD receives.
//
// The transports re-export its types under their own names (shared.go,
// written by internal/transport/gen) and each defines its own Poller over a
// Dispatcher, so that Poll inlines the caller's function at the call site.
package transport
