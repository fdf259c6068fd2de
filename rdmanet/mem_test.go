package rdmanet

import (
	"io"
	"testing"
)

// A closed connection's memory goes back to its IA and the next
// connection takes it, with its receive ring registered afresh: the key a
// former peer learnt must not be valid for the ring of someone else.
func TestConnMemoryReused(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		c1, c2, stop := pipe(t, ia, 0)
		// Keep the IAs open, and with them the memory they keep.
		for _, s := range []*sharedIA{c1.ia, c2.ia} {
			s.hold()
			defer s.release()
		}
		keys := map[*connMemory]uint32{c1.mem: c1.recv.cur.reg.rkey, c2.mem: c2.recv.cur.reg.rkey}
		stop()
		d1, d2, stop := pipe(t, ia, 0)
		defer stop()
		for _, c := range []*Conn{d1, d2} {
			key, ok := keys[c.mem]
			if !ok {
				t.Fatal("a new connection mapped fresh memory while the closed connections' memory was idle")
			}
			if c.recv.cur.reg.rkey == key {
				t.Errorf("the reused ring kept its key %#x", key)
			}
		}
		msg := []byte("through reused memory")
		if _, err := d1.Write(msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(d2, got); err != nil {
			t.Fatal(err)
		}
		if string(got) != string(msg) {
			t.Fatalf("read %q, want %q", got, msg)
		}
	})
}

// The memory an IA keeps is bounded, and released when the IA closes.
func TestIdleMemoryBounded(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		var conns []*Conn
		for range 2 * maxIdleMemory / (3 * DefaultBufferSize) {
			c1, c2, _ := pipe(t, ia, 0)
			conns = append(conns, c1, c2)
		}
		s := conns[0].ia
		s.hold()
		for _, c := range conns {
			c.Close()
		}
		s.mu.Lock()
		kept, n := s.idleBytes, len(s.idleMem)
		s.mu.Unlock()
		if kept > maxIdleMemory || n == 0 {
			t.Errorf("the IA keeps %d bytes in %d mappings, want some and at most %d", kept, n, maxIdleMemory)
		}
		s.release()
		if s.idleBytes != 0 || s.idleMem != nil {
			t.Errorf("the closed IA still keeps %d bytes", s.idleBytes)
		}
	})
}
