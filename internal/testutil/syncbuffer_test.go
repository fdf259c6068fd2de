package testutil

import (
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSyncBufferConcurrent: writes from many goroutines while another
// reads all land, whole (run it under -race).
func TestSyncBufferConcurrent(t *testing.T) {
	var b SyncBuffer
	var wg sync.WaitGroup
	stop := make(chan struct{})
	read := make(chan struct{})
	go func() {
		defer close(read)
		for {
			select {
			case <-stop:
				return
			default:
				if n := b.Len(); n%4 != 0 || len(b.String()) < n {
					t.Errorf("read %d bytes, not whole writes of 4", n)
					return
				}
			}
		}
	}()
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				b.Write([]byte("abcd"))
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-read
	if got, want := b.String(), strings.Repeat("abcd", 800); got != want {
		t.Errorf("got %d bytes, want %d", len(got), len(want))
	}
}
