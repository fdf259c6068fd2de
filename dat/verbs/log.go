//go:build verbs && linux && cgo

package verbs

import (
	"context"
	"log/slog"
	"os"
)

// The provider's diagnostics are conditions nobody can act on (an
// unexpected error of an event loop, a QP that did not drain, a CM event
// as it arrives); they go to the IA's logger (driver.OpenConfig.Logger,
// dat.IAOptions.Logger) at Debug level, with structured attributes, so
// that a program sees them where its other records go and only when it
// asks for Debug. Without a logger they go to slog.Default(), or, with
// RDMANET_VERBS_DEBUG set in the environment, to standard error whatever
// the default logger's level (the switch the provider had before it used
// log/slog).

// debugEnv is whether RDMANET_VERBS_DEBUG is set.
var debugEnv = os.Getenv("RDMANET_VERBS_DEBUG") != ""

// envLogger writes Debug records to standard error for RDMANET_VERBS_DEBUG.
var envLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))

// logger returns the logger for the provider's diagnostics: l if set.
func logger(l *slog.Logger) *slog.Logger {
	switch {
	case l != nil:
		return l
	case debugEnv:
		return envLogger
	}
	return slog.Default()
}

// debug logs msg at Debug level with the IA's address and attrs.
func (ia *IA) debug(msg string, attrs ...slog.Attr) {
	l := logger(ia.log)
	ctx := context.Background()
	if !l.Enabled(ctx, slog.LevelDebug) {
		return
	}
	l.LogAttrs(ctx, slog.LevelDebug, "verbs: "+msg, append([]slog.Attr{slog.String("ia", ia.ip.String())}, attrs...)...)
}

// debugDevice logs msg at Debug level for a device, which has no IA of its
// own (several IAs share it), through l (nil: the default).
func debugDevice(l *slog.Logger, dev, msg string, attrs ...slog.Attr) {
	lg := logger(l)
	ctx := context.Background()
	if !lg.Enabled(ctx, slog.LevelDebug) {
		return
	}
	lg.LogAttrs(ctx, slog.LevelDebug, "verbs: "+msg, append([]slog.Attr{slog.String("device", dev)}, attrs...)...)
}
