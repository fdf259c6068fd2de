package rdmanet

import (
	"bytes"
	"io"
	"testing"
	"time"
)

// A Conn has no goroutine of its own, so a writer that stops calling in
// (its last Write returned) must not leave its last data unannounced.
// Small writes into a large ring use a control credit each for their
// announcements and rarely have to wait for ring space, so the writer
// often runs out of credit with data written and not yet announced; when
// that happens on its last Write, the announcement must still go once
// the reader returns credit, with the writer gone idle.
func TestWriterGoesIdle(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		for round := range 5 {
			c1, c2, stop := pipe(t, ia, 0)
			const n, size = 2000, 4096
			want := make([]byte, n*size)
			for i := range want {
				want[i] = byte(i*7 + round)
			}
			got := make(chan []byte, 1)
			go func() {
				b := make([]byte, len(want))
				c2.SetReadDeadline(time.Now().Add(20 * time.Second))
				k, _ := io.ReadFull(c2, b)
				got <- b[:k]
			}()
			for i := 0; i < n; i++ {
				if _, err := c1.Write(want[i*size : (i+1)*size]); err != nil {
					t.Fatalf("round %d write %d: %v", round, i, err)
				}
			}
			// From here on the writer never calls in.
			b := <-got
			stop()
			if !bytes.Equal(b, want) {
				t.Fatalf("round %d: reader got %d of %d bytes", round, len(b), len(want))
			}
		}
	})
}

// The same from the reader's side: a reader that consumed the ring and
// then stops calling in must still return the space, or a writer blocked
// on a full ring would wait for good.
func TestReaderGoesIdle(t *testing.T) {
	forEach(t, func(t *testing.T, ia string) {
		c1, c2, stop := pipe(t, ia, 16<<10)
		defer stop()
		const total = 4 << 20
		done := make(chan error, 1)
		go func() {
			// Reads in bursts, pausing between them with nothing in
			// progress on the Conn.
			buf := make([]byte, 64<<10)
			read := 0
			for read < total {
				n, err := c2.Read(buf)
				if err != nil {
					done <- err
					return
				}
				read += n
				if read%(256<<10) < n {
					time.Sleep(time.Millisecond)
				}
			}
			done <- nil
		}()
		c1.SetWriteDeadline(time.Now().Add(20 * time.Second))
		if _, err := c1.Write(make([]byte, total)); err != nil {
			t.Fatalf("writer: %v", err)
		}
		if err := <-done; err != nil {
			t.Fatalf("reader: %v", err)
		}
	})
}
