package rdmanet

import (
	"context"
	"encoding/json"
	"expvar"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// findConn and findListener pick an object out of a Listing by ID (other
// tests' objects may be listed too).
func findConn(l Listing, id uint64) *ConnInfo {
	for i := range l.Conns {
		if l.Conns[i].ID == id {
			return &l.Conns[i]
		}
	}
	return nil
}

func findListener(l Listing, id uint64) *ListenerInfo {
	for i := range l.Listeners {
		if l.Listeners[i].ID == id {
			return &l.Listeners[i]
		}
	}
	return nil
}

// TestSnapshot: live listeners and both ends of a connection are listed
// with their addresses, state, role and Stats; Close removes them.
func TestSnapshot(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		nl, err := (&ListenConfig{IA: ia, Backlog: 7}).Listen(context.Background(), "rdma", listenAddr(ia))
		require.NoError(t, err)
		l := nl.(*Listener)
		defer l.Close()
		accepted := make(chan net.Conn, 1)
		go func() {
			c, _ := l.Accept()
			accepted <- c
		}()
		d := Dialer{IA: ia, Timeout: 10 * time.Second, NoDup: true}
		nc, err := d.Dial("rdma", l.Addr().String())
		require.NoError(t, err)
		c1 := nc.(*Conn)
		defer c1.Close()
		sc := <-accepted
		require.NotNil(t, sc)
		c2 := sc.(*Conn)
		defer c2.Close()
		_, err = c1.Write([]byte("hello"))
		require.NoError(t, err)
		_, err = io.ReadFull(c2, make([]byte, 5))
		require.NoError(t, err)

		snap := Snapshot()
		li := findListener(snap, l.id)
		require.NotNil(t, li, "listener listed")
		require.Equal(t, l.Addr().String(), li.Addr)
		require.Equal(t, 7, li.Backlog)
		require.Equal(t, uint64(1), li.Accepted)
		require.NotEmpty(t, li.Provider)
		i1, i2 := findConn(snap, c1.id), findConn(snap, c2.id)
		require.NotNil(t, i1, "dialed Conn listed")
		require.NotNil(t, i2, "accepted Conn listed")
		require.Equal(t, "dial", i1.Role)
		require.Equal(t, "accept", i2.Role)
		require.Equal(t, "open", i1.State)
		require.Equal(t, c1.LocalAddr().String(), i1.Local)
		require.Equal(t, c1.RemoteAddr().String(), i1.Remote)
		require.Equal(t, i1.Local, i2.Remote)
		require.Equal(t, uint64(5), i1.Stats.BytesWritten)
		require.Equal(t, uint64(5), i2.Stats.BytesRead)
		require.Less(t, i1.ID, i2.ID, "listed in the order made")

		require.NoError(t, c1.Close())
		require.NoError(t, l.Close())
		snap = Snapshot()
		require.Nil(t, findConn(snap, c1.id), "a closed Conn is not listed")
		require.Nil(t, findListener(snap, l.id), "a closed Listener is not listed")
		require.NotNil(t, findConn(snap, c2.id))
	})
}

// TestSnapshotForgetsFailures: Conns that never reached their user (a
// refused handshake on both sides) leave the registry.
func TestSnapshotForgetsFailures(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		l, err := (&ListenConfig{IA: ia}).Listen(context.Background(), "rdma", listenAddr(ia))
		require.NoError(t, err)
		defer l.Close()
		before := liveConnIDs()
		setHook(&testHelloHook, func(b []byte) []byte { b[4] = 9; return b })
		d := Dialer{IA: ia, Timeout: 5 * time.Second}
		_, err = d.Dial("rdma", l.Addr().String())
		testHelloHook.Store(nil)
		require.Error(t, err)
		require.Subset(t, before, liveConnIDs())
		require.Equal(t, uint64(1), findListener(Snapshot(), l.(*Listener).id).Refused)
	})
}

// TestStatsHandler serves the listing as a table and as JSON, and is
// published through expvar.
func TestStatsHandler(t *testing.T) {
	c1, c2, stop := pipe(t, "iwarp", 0)
	defer stop()
	_, err := c1.Write([]byte("0123456789"))
	require.NoError(t, err)
	_, err = io.ReadFull(c2, make([]byte, 10))
	require.NoError(t, err)

	srv := httptest.NewServer(StatsHandler())
	defer srv.Close()
	get := func(query, accept string) (*http.Response, string) {
		req, err := http.NewRequest("GET", srv.URL+query, nil)
		require.NoError(t, err)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(b)
	}

	resp, body := get("", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Content-Type"), "text/plain")
	var line string
	for _, l := range strings.Split(body, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == strconv.FormatUint(c1.id, 10) {
			line = l
		}
	}
	require.NotEmpty(t, line, "a line for the dialed Conn in\n%s", body)
	f := strings.Fields(line)
	require.Equal(t, []string{"dial", "open", c1.LocalAddr().String(), c1.RemoteAddr().String()}, f[1:5])
	require.Contains(t, body, "TX_BYTES")

	for _, tc := range []struct{ query, accept string }{
		{"?format=json", ""},
		{"", "application/json"},
		{"", "text/html, application/json;q=0.9"},
	} {
		resp, body := get(tc.query, tc.accept)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"), "%+v", tc)
		var l Listing
		require.NoError(t, json.Unmarshal([]byte(body), &l))
		ci := findConn(l, c1.id)
		require.NotNil(t, ci)
		require.Equal(t, uint64(10), ci.Stats.BytesWritten)
		require.Equal(t, "open", ci.State)
	}
	// ?format=text wins over Accept.
	resp, _ = get("?format=text", "application/json")
	require.Contains(t, resp.Header.Get("Content-Type"), "text/plain")

	r, err := srv.Client().Post(srv.URL, "text/plain", strings.NewReader("x"))
	require.NoError(t, err)
	r.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, r.StatusCode)

	v := expvar.Get(ExpvarName)
	require.NotNil(t, v, "published through expvar")
	var l Listing
	require.NoError(t, json.Unmarshal([]byte(v.String()), &l))
	require.NotNil(t, findConn(l, c2.id))
}

// TestWriteTableOneLineEach: an error text with a newline or a tab does
// not break the table.
func TestWriteTableOneLineEach(t *testing.T) {
	var b strings.Builder
	require.NoError(t, Listing{Conns: []ConnInfo{{ID: 1, Role: "dial", State: "open", Stats: Stats{LastError: "a\nb\tc"}}}}.WriteTable(&b))
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	require.Len(t, lines, 4, "%q", b.String()) // summary, blank, header, the row
	require.Contains(t, lines[3], "a b c")
}

// TestSnapshotConcurrent takes snapshots without pause while connections
// are dialed, accepted, used, refused and closed: under the race detector
// this checks that everything a listing reads is read safely at every
// stage of a Conn's life.
func TestSnapshotConcurrent(t *testing.T) {
	l, err := (&ListenConfig{IA: "iwarp", Backlog: 4}).Listen(context.Background(), "rdma", "127.0.0.1:0")
	require.NoError(t, err)
	serve(t, l, func(c net.Conn) { io.Copy(c, c); c.Close() })
	stop := make(chan struct{})
	snapped := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				snapped <- n
				return
			default:
			}
			var b strings.Builder
			Snapshot().WriteTable(&b)
			n++
		}
	}()
	d := Dialer{IA: "iwarp", Timeout: 10 * time.Second}
	for i := 0; i < 20; i++ {
		if i%5 == 4 {
			setHook(&testHelloHook, func(b []byte) []byte { b[4] = 9; return b })
		}
		c, err := d.Dial("rdma", l.Addr().String())
		testHelloHook.Store(nil)
		if i%5 == 4 {
			require.Error(t, err)
			continue
		}
		require.NoError(t, err)
		_, err = c.Write([]byte("x"))
		require.NoError(t, err)
		_, err = io.ReadFull(c, make([]byte, 1))
		require.NoError(t, err)
		require.NoError(t, c.Close())
	}
	close(stop)
	require.Positive(t, <-snapped)
}
