//go:build verbs && linux && cgo

package verbs

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/internal/testutil"
)

// TestDebugLog: the provider's diagnostics go through log/slog, to the
// logger the IA was opened with (driver.OpenConfig.Logger), at Debug
// level and with the IA's address: here the rdma_cm events of a
// connection the IA accepts, up to ESTABLISHED. A logger set to Info gets
// none of them.
func TestDebugLog(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		open := func(level slog.Level, w *testutil.SyncBuffer) *IA {
			x, err := Driver{}.OpenWith(context.Background(), driver.OpenConfig{
				Args:   []string{d.addr},
				Logger: slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})),
			})
			if err != nil {
				t.Fatalf("open %s: %v", d.addr, err)
			}
			t.Cleanup(func() { x.Close() })
			return iaOf(t, x)
		}
		var debug, info testutil.SyncBuffer
		s := newEndOn(t, open(slog.LevelDebug, &debug))
		quiet := newEndOn(t, open(slog.LevelInfo, &info))
		connectPair(t, newEnd(t, d), s)
		connectPair(t, newEnd(t, d), quiet)
		s.qp.Disconnect(false)
		quiet.qp.Disconnect(false)

		events := map[string]bool{}
		for _, line := range strings.Split(strings.TrimSpace(debug.String()), "\n") {
			var rec struct {
				Level, Msg, IA, Event string
			}
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			if rec.Level != "DEBUG" || !strings.HasPrefix(rec.Msg, "verbs: ") {
				t.Errorf("record %q: want level DEBUG and a message starting \"verbs: \"", line)
			}
			if rec.Msg == "verbs: cm event" {
				if rec.IA != d.addr {
					t.Errorf("record %q: want ia %s", line, d.addr)
				}
				events[rec.Event] = true
			}
		}
		for _, want := range []string{"RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_ESTABLISHED"} {
			if !events[want] {
				t.Errorf("no cm event record for %s in:\n%s", want, debug.String())
			}
		}
		if s := info.String(); s != "" {
			t.Errorf("a logger at Info level got:\n%s", s)
		}
	})
}
