package rdmanet

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/internal/testutil"
)

// logSink collects JSON log records; safe for concurrent handlers.
type logSink struct{ testutil.SyncBuffer }

// records returns the records whose message is msg (all of them for ""),
// as attribute maps.
func (s *logSink) records(msg string) []map[string]any {
	text := s.String()
	var out []map[string]any
	for _, line := range strings.Split(text, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && (msg == "" || m["msg"] == msg) {
			out = append(out, m)
		}
	}
	return out
}

func newLogSink() (*logSink, *slog.Logger) {
	s := &logSink{}
	return s, slog.New(slog.NewJSONHandler(s, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestLogLifecycle: dialed, accepted and closed (with byte counts) at
// Debug; a refused handshake at Info on both sides with its reason; a
// peer's reset at Info.
func TestLogLifecycle(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		sink, log := newLogSink()
		nl, err := (&ListenConfig{IA: ia, Backlog: 1, Logger: log}).Listen(context.Background(), "rdma", listenAddr(ia))
		require.NoError(t, err)
		l := nl.(*Listener)
		defer l.Close()
		d := Dialer{IA: ia, Timeout: 5 * time.Second, NoDup: true, Logger: log}
		nc, err := d.Dial("rdma", l.Addr().String())
		require.NoError(t, err)
		c1 := nc.(*Conn)
		defer c1.Close()
		// The backlog holds one: the next dial is refused.
		_, err = d.Dial("rdma", l.Addr().String())
		require.Error(t, err)
		sc, err := l.Accept()
		require.NoError(t, err)
		c2 := sc.(*Conn)
		defer c2.Close()
		_, err = c1.Write([]byte("twelve bytes"))
		require.NoError(t, err)
		_, err = io.ReadFull(c2, make([]byte, 12))
		require.NoError(t, err)
		require.NoError(t, c1.Close())

		dialed := sink.records("rdmanet: dialed")
		require.Len(t, dialed, 1)
		require.Equal(t, "DEBUG", dialed[0]["level"])
		require.Equal(t, float64(c1.id), dialed[0]["conn"])
		require.Equal(t, c1.RemoteAddr().String(), dialed[0]["remote"])
		accepted := sink.records("rdmanet: accepted")
		require.Len(t, accepted, 1)
		require.Equal(t, float64(c2.id), accepted[0]["conn"])
		closed := sink.records("rdmanet: closed")
		require.Len(t, closed, 1)
		require.Equal(t, float64(c1.id), closed[0]["conn"])
		require.Equal(t, float64(12), closed[0]["bytes_written"])
		require.Equal(t, true, closed[0]["graceful"])

		refused := sink.records("rdmanet: handshake refused")
		require.Len(t, refused, 1)
		require.Equal(t, "INFO", refused[0]["level"])
		require.Equal(t, "backlog full", refused[0]["reason"])
		failed := sink.records("rdmanet: dial failed")
		require.Len(t, failed, 1)
		require.Equal(t, "INFO", failed[0]["level"])
		require.Equal(t, "handshake rejected", failed[0]["reason"])

		// A peer that vanishes without its FIN: a reset, at Info.
		c3, c4 := dialAccept(t, &d, l)
		defer c3.Close()
		defer c4.Close()
		c3.ep.Disconnect(0) // abrupt
		c4.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = c4.Read(make([]byte, 1))
		require.Error(t, err)
		reset := sink.records("rdmanet: peer reset")
		require.Len(t, reset, 1)
		require.Equal(t, "INFO", reset[0]["level"])
		require.Equal(t, float64(c4.id), reset[0]["conn"])

		// Those were all the records: none per message.
		var msgs []string
		for _, r := range sink.records("") {
			msgs = append(msgs, r["msg"].(string))
		}
		require.ElementsMatch(t, []string{"rdmanet: listening", "rdmanet: dialed", "rdmanet: dial failed",
			"rdmanet: handshake refused", "rdmanet: accepted", "rdmanet: closed",
			"rdmanet: dialed", "rdmanet: accepted", "rdmanet: peer reset"}, msgs)
	})
}

// dialAccept dials l with d and accepts the connection.
func dialAccept(t *testing.T, d *Dialer, l net.Listener) (*Conn, *Conn) {
	t.Helper()
	nc, err := d.Dial("rdma", l.Addr().String())
	require.NoError(t, err)
	sc, err := l.Accept()
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	return nc.(*Conn), sc.(*Conn)
}

// TestDialerCopy: a Dialer is plain configuration. Copies made by value
// dial independently, share dup-connect templates through the IA (the
// copy's dial reuses the original's live connection), and a Conn's Dup
// uses the configuration of its own dial even after the Dialer changed.
func TestDialerCopy(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		l, err := (&ListenConfig{IA: ia}).Listen(context.Background(), "rdma", listenAddr(ia))
		require.NoError(t, err)
		serve(t, l, func(c net.Conn) { io.Copy(c, c); c.Close() })
		sink, log := newLogSink()
		d1 := Dialer{IA: ia, Timeout: 5 * time.Second, Logger: log}
		d2 := d1 // by value: go vet's copylocks has nothing to say
		d3 := d1
		d3.NoDup = true
		var wg sync.WaitGroup
		conns := make([]net.Conn, 3)
		errs := make([]error, 3)
		c0, err := d1.Dial("rdma", l.Addr().String())
		require.NoError(t, err)
		defer c0.Close()
		for i, d := range []Dialer{d1, d2, d3} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				conns[i], errs[i] = d.Dial("rdma", l.Addr().String())
			}()
		}
		wg.Wait()
		for i, c := range conns {
			require.NoError(t, errs[i])
			defer c.Close()
		}
		for _, c := range append(conns, c0) {
			_, err := c.Write([]byte("copy"))
			require.NoError(t, err)
			b := make([]byte, 4)
			_, err = io.ReadFull(c, b)
			require.NoError(t, err)
			require.Equal(t, "copy", string(b))
		}
		dup := map[uint64]bool{}
		for _, r := range sink.records("rdmanet: dialed") {
			dup[uint64(r["conn"].(float64))] = r["dup"].(bool)
		}
		require.False(t, dup[c0.(*Conn).id], "the first dial has no template")
		require.True(t, dup[conns[0].(*Conn).id], "d1 dups its live connection")
		require.True(t, dup[conns[1].(*Conn).id], "so does its copy d2")
		require.False(t, dup[conns[2].(*Conn).id], "d3 says NoDup")

		// The Conn keeps its dial's configuration.
		d1.Timeout = time.Nanosecond
		x, err := c0.(*Conn).Dup(context.Background())
		require.NoError(t, err)
		x.Close()
	})
}

// TestLogCanceledDial: a dial its caller cancelled is no failure worth
// Info (net/http cancels dials it no longer needs); a timed-out one is.
func TestLogCanceledDial(t *testing.T) {
	sink, log := newLogSink()
	d := Dialer{Logger: log}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := d.DialContext(ctx, "rdma", "127.0.0.1:9")
	require.ErrorIs(t, err, context.Canceled)
	ctx, cancel = context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err = d.DialContext(ctx, "rdma", "127.0.0.1:9")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "a dial that never started times out as one that did")
	recs := sink.records("rdmanet: dial failed")
	require.Len(t, recs, 2)
	require.Equal(t, "DEBUG", recs[0]["level"])
	require.Equal(t, "canceled", recs[0]["reason"])
	require.Equal(t, "INFO", recs[1]["level"])
	require.Equal(t, "timeout", recs[1]["reason"])
}
