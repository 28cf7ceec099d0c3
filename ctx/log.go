package ctx

import (
	"context"
	"log/slog"
)

// currentLogger returns the logger the Context reports its control-plane
// events to (Options.Logger, or SetLogger's), nil when it is silent.
func (c *Context) currentLogger() *slog.Logger { return c.logger.Load() }

// SetLogger replaces the Context's logger (nil: silent), for a Context
// opened without Options (a provider's own Open, as sim.Fabric.Open). It may
// be called from any goroutine.
func (c *Context) SetLogger(l *slog.Logger) { c.logger.Store(l) }

// The messages of the control-plane events, one per kind, so that a log
// reader can match them.
const (
	logGIDChosen    = "mlx5kit: GID chosen"
	logQPTransition = "mlx5kit: QP transition"
	logAsyncEvent   = "mlx5kit: async event"
)

// logGID reports the GID entry ChooseGID selected (Info).
func (c *Context) logGID(port uint8, sel GIDSelector, e GIDEntry) {
	l := c.currentLogger()
	if l == nil {
		return
	}
	l.LogAttrs(context.Background(), slog.LevelInfo, logGIDChosen,
		slog.String("device", c.name), slog.Int("port", int(port)), slog.String("selector", sel.String()),
		slog.Int("index", e.Index), slog.String("gid", e.GID.String()), slog.String("type", e.Type.String()))
}

// logTransition reports a queue pair's move from one state to another
// (Debug: a channel moves each of its QPs through three).
func (c *Context) logTransition(t QPType, qpn uint32, from, to QPState) {
	l := c.currentLogger()
	if l == nil {
		return
	}
	l.LogAttrs(context.Background(), slog.LevelDebug, logQPTransition,
		slog.String("device", c.name), slog.String("qp_type", t.String()), slog.Uint64("qpn", uint64(qpn)),
		slog.String("from", from.String()), slog.String("to", to.String()))
}

// logEvent reports an async event read by readAsyncEvent: Error for the
// fatal ones and the errors, Info for the others.
func (c *Context) logEvent(ev AsyncEvent) {
	l := c.currentLogger()
	if l == nil {
		return
	}
	level := slog.LevelInfo
	switch ev.Type {
	case EventCQError, EventQPFatal, EventQPRequestError, EventQPAccessError, EventPortError,
		EventDeviceFatal, EventPathMigrationError, EventSRQError, EventWQFatal:
		level = slog.LevelError
	}
	attrs := []slog.Attr{slog.String("device", c.name), slog.String("event", ev.Type.String())}
	switch {
	case ev.QPN != 0:
		attrs = append(attrs, slog.Uint64("qpn", uint64(ev.QPN)))
	case ev.CQN != 0:
		attrs = append(attrs, slog.Uint64("cqn", uint64(ev.CQN)))
	case ev.SRQN != 0:
		attrs = append(attrs, slog.Uint64("srqn", uint64(ev.SRQN)))
	case ev.Port != 0:
		attrs = append(attrs, slog.Int("port", int(ev.Port)))
	}
	if ev.Detail != "" {
		attrs = append(attrs, slog.String("detail", ev.Detail))
	}
	l.LogAttrs(context.Background(), level, logAsyncEvent, attrs...)
}
