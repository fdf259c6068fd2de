package rdmanet

import (
	"cmp"
	"encoding/json"
	"expvar"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// The registry lists the process's live Conns and Listeners, as SMC-R's
// smcss or ss(8) list sockets, for Snapshot, the "rdmanet" expvar and
// StatsHandler. A Conn is listed from its creation (the handshake) until
// its memory is released, the one step every Conn's life ends with, so
// the registry never keeps a finished Conn alive; a Listener until Close.
// Adding and removing are one map operation under a mutex of their own,
// taken at set-up and teardown only, never on the data path, and never
// while a Conn's mutex is held.
type liveSet struct {
	mu        sync.Mutex
	conns     map[*Conn]struct{}
	listeners map[*Listener]struct{}
}

var registry = &liveSet{conns: map[*Conn]struct{}{}, listeners: map[*Listener]struct{}{}}

// nextID numbers Conns and Listeners, in the order they are made.
var nextID atomic.Uint64

func (r *liveSet) addConn(c *Conn) {
	r.mu.Lock()
	r.conns[c] = struct{}{}
	r.mu.Unlock()
}

func (r *liveSet) removeConn(c *Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
}

func (r *liveSet) addListener(l *Listener) {
	r.mu.Lock()
	r.listeners[l] = struct{}{}
	r.mu.Unlock()
}

func (r *liveSet) removeListener(l *Listener) {
	r.mu.Lock()
	delete(r.listeners, l)
	r.mu.Unlock()
}

// Listing is a snapshot of the process's rdmanet connections and
// listeners (see Snapshot).
type Listing struct {
	// Time is when the snapshot was taken.
	Time      time.Time      `json:"time"`
	Listeners []ListenerInfo `json:"listeners"`
	Conns     []ConnInfo     `json:"conns"`
	// Fallbacks counts the process's connections that fell back to plain
	// TCP (see FallbackConn), dialed and accepted, since it started, by
	// reason: every FallbackReason's String is a key, zero or not.
	Fallbacks map[string]uint64 `json:"fallbacks"`
}

// ConnInfo describes one connection in a Listing.
type ConnInfo struct {
	// ID numbers the process's connections and listeners in the order
	// they were made; log records carry it as "conn".
	ID uint64 `json:"id"`
	// Role is "dial" for a dialed connection and "accept" for one a
	// Listener made.
	Role string `json:"role"`
	// State is where the connection is in its life: "handshake",
	// "open", "peer-gone" (the peer closed or went away; the ring may
	// still hold data to read), "failed", "closing" or "closed".
	State string `json:"state"`
	// Local and Remote are the addresses, empty before the handshake
	// ends.
	Local  string `json:"local"`
	Remote string `json:"remote"`
	// Age is how long ago the connection was made.
	Age   time.Duration `json:"age_ns"`
	Stats Stats         `json:"stats"`
}

// ListenerInfo describes one listener in a Listing.
type ListenerInfo struct {
	// ID numbers listeners and connections together (see ConnInfo.ID);
	// log records carry it as "listener".
	ID   uint64 `json:"id"`
	Addr string `json:"addr"`
	// IA is the interface adapter's name and Provider its provider's.
	IA       string        `json:"ia"`
	Provider string        `json:"provider"`
	Age      time.Duration `json:"age_ns"`
	Backlog  int           `json:"backlog"`
	// Ready counts connections established and waiting for Accept;
	// Pending those still in their handshake.
	Ready   int `json:"ready"`
	Pending int `json:"pending"`
	// Accepted counts connections Accept returned; Refused connection
	// requests turned down (a bad Hello, a full backlog, no resources).
	Accepted uint64 `json:"accepted"`
	Refused  uint64 `json:"refused"`
}

// Snapshot lists the process's live rdmanet listeners and connections,
// each in the order it was made, with every connection's Stats. It is
// safe to call at any time; it takes each object's lock briefly and never
// blocks on I/O.
func Snapshot() Listing {
	registry.mu.Lock()
	conns := make([]*Conn, 0, len(registry.conns))
	for c := range registry.conns {
		conns = append(conns, c)
	}
	lns := make([]*Listener, 0, len(registry.listeners))
	for l := range registry.listeners {
		lns = append(lns, l)
	}
	registry.mu.Unlock()
	// The objects stay valid after removal (their fields are plain
	// memory), so a Conn torn down meanwhile is described as closed.
	now := time.Now()
	out := Listing{Time: now, Listeners: make([]ListenerInfo, 0, len(lns)), Conns: make([]ConnInfo, 0, len(conns)),
		Fallbacks: fallbackCounts()}
	for _, l := range lns {
		out.Listeners = append(out.Listeners, l.info(now))
	}
	for _, c := range conns {
		out.Conns = append(out.Conns, c.info(now))
	}
	slices.SortFunc(out.Listeners, func(a, b ListenerInfo) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(out.Conns, func(a, b ConnInfo) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

func (c *Conn) info(now time.Time) ConnInfo {
	ci := ConnInfo{ID: c.id, Role: "accept", Age: now.Sub(c.born), Stats: c.Stats()}
	if c.dialer != nil {
		ci.Role = "dial"
	}
	// established sets the addresses under c.mu, once.
	c.mu.Lock()
	ci.State = c.lc.String()
	ci.Local, ci.Remote = addrString(c.laddr), addrString(c.raddr)
	c.mu.Unlock()
	return ci
}

func addrString(a *Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

func (l *Listener) info(now time.Time) ListenerInfo {
	li := ListenerInfo{ID: l.id, Addr: l.addr.String(), IA: l.ia.name, Provider: l.ia.provider,
		Age: now.Sub(l.born), Backlog: l.backlog, Accepted: l.accepted.Load(), Refused: l.refused.Load()}
	l.mu.Lock()
	li.Ready, li.Pending = len(l.ready), len(l.pending)
	l.mu.Unlock()
	return li
}

// ExpvarName is the name under which the package publishes Snapshot
// through package expvar: a program that serves expvar's handler shows
// the listing there as JSON.
//
// Importing expvar (which this package does) installs that handler on
// http.DefaultServeMux at /debug/vars, as it does for every program that
// imports expvar: a program serving DefaultServeMux to untrusted clients
// shows them its connections' addresses there. Such a program should
// serve a mux of its own.
const ExpvarName = "rdmanet"

func init() {
	expvar.Publish(ExpvarName, expvar.Func(func() any { return Snapshot() }))
}

// StatsHandler returns an http.Handler that serves Snapshot: as a text
// table, one line per listener and per connection (as smcss does), or as
// JSON (a Listing) when the request asks with ?format=json or an Accept
// header naming application/json. cmd/rdmastat reads either. Mount it
// where the program serves its diagnostics, e.g.
//
//	http.Handle("/debug/rdmanet", rdmanet.StatsHandler())
func StatsHandler() http.Handler { return http.HandlerFunc(serveStats) }

func serveStats(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	l := Snapshot()
	if wantsJSON(r) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(l)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	l.WriteTable(w)
}

// wantsJSON reports whether r asks for JSON: ?format=json, or an Accept
// header that names application/json (?format=text wins over Accept).
func wantsJSON(r *http.Request) bool {
	switch r.URL.Query().Get("format") {
	case "json":
		return true
	case "text":
		return false
	}
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == "application/json" {
			return true
		}
	}
	return false
}

// WriteTable writes l as text: a header line, a line of the TCP
// fallbacks by reason if there were any, then a table of listeners and
// one of connections, one line each, every column but the last (the
// last error's text) one word. Sizes are bytes, ages and wait times are
// rounded to the millisecond, and the wait columns are "count/time" per
// cause (Stats): credit, ring full, send queue.
func (l Listing) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "rdmanet at %s: listeners %d, connections %d\n", l.Time.Format(time.RFC3339), len(l.Listeners), len(l.Conns))
	if f := fallbackLine(l.Fallbacks); f != "" {
		fmt.Fprintln(tw, "fallbacks to TCP:", f)
	}
	if len(l.Listeners) > 0 {
		fmt.Fprintln(tw, "\nID\tLISTEN\tIA\tPROVIDER\tAGE\tBACKLOG\tREADY\tPENDING\tACCEPTED\tREFUSED")
		for _, li := range l.Listeners {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\n", li.ID, li.Addr, li.IA, li.Provider,
				round(li.Age), li.Backlog, li.Ready, li.Pending, li.Accepted, li.Refused)
		}
	}
	if len(l.Conns) > 0 {
		fmt.Fprintln(tw, "\nID\tROLE\tSTATE\tLOCAL\tREMOTE\tIA\tAGE\tTX_BYTES\tRX_BYTES\tRDMA_WR\tINLINE\tCTRL_TX\tCTRL_RX\tCREDIT_WAIT\tRING_WAIT\tSQ_WAIT\tERRORS\tLAST_ERROR")
		for _, c := range l.Conns {
			s := &c.Stats
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%d\t%s\n",
				c.ID, c.Role, c.State, dash(c.Local), dash(c.Remote), s.IA, round(c.Age),
				s.BytesWritten, s.BytesRead, s.RDMAWrites, s.InlineWrites, s.ControlSent, s.ControlReceived,
				waits(s.CreditStalls, s.CreditStallTime), waits(s.RingFullWaits, s.RingFullTime),
				waits(s.SendQueueWaits, s.SendQueueTime), s.Errors, dash(s.LastError))
		}
	}
	return tw.Flush()
}

// fallbackLine lists the non-zero fallback counts as "reason count"
// pairs in the order of the reasons' names; "" when there are none.
func fallbackLine(m map[string]uint64) string {
	keys := make([]string, 0, len(m))
	for k, n := range m {
		if n > 0 {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", dash(k), m[k])
	}
	return strings.Join(parts, ", ")
}

func round(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

// waits is one wait column: "count/time", one word so that the table
// splits on blanks.
func waits(n uint64, d time.Duration) string { return fmt.Sprintf("%d/%v", n, round(d)) }

func dash(s string) string {
	if s == "" {
		return "-"
	}
	// One line per connection: an error text must not break the table.
	return strings.NewReplacer("\n", " ", "\t", " ").Replace(s)
}
