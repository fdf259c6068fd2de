package dat

import "testing"

// A queue goes back to its pool cleared: pooled, it must keep no EP,
// private data or software pointer of a freed EVD reachable.
func TestPutRingClearsEvents(t *testing.T) {
	r := getRing(8)
	pd := []byte("private")
	for i := range r {
		r[i] = Event{Number: ConnectionEventEstablished, Conn: ConnectionData{EP: &EP{}, PrivateData: pd}, Software: &i}
	}
	putRing(r)
	for i := range r {
		if r[i].Number != 0 || r[i].Conn.EP != nil || r[i].Conn.PrivateData != nil || r[i].Software != nil {
			t.Fatalf("slot %d still holds %+v after putRing", i, r[i])
		}
	}
}

// Growing keeps the queued events in order, including across the wrap,
// and only lengths that are powers of two (the growth steps up to a
// power-of-two qlen) are pooled.
func TestGrowKeepsOrder(t *testing.T) {
	e := newEVD(nil, 64, EVDSoftware)
	for i := 0; i < 3; i++ {
		e.enqueueLocked(Event{Number: SoftwareEvent, Software: i}, false)
	}
	e.popLocked()
	e.popLocked()
	for i := 3; i < 40; i++ {
		if !e.enqueueLocked(Event{Number: SoftwareEvent, Software: i}, false) {
			t.Fatalf("event %d discarded", i)
		}
	}
	if len(e.ring) != 64 {
		t.Fatalf("queue of %d slots after 38 events, want 64", len(e.ring))
	}
	for want := 2; want < 40; want++ {
		if got := e.popLocked().Software; got != want {
			t.Fatalf("dequeued %v, want %d", got, want)
		}
	}
	for _, n := range []int{0, 3, 112, 2 * maxPooledRing} {
		if ringPool(n) != nil {
			t.Errorf("a queue of %d slots is pooled", n)
		}
	}
	for _, n := range []int{1, 4, 64, maxPooledRing} {
		if ringPool(n) == nil {
			t.Errorf("a queue of %d slots is not pooled", n)
		}
	}
}
