package dat_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// A Wait that blocks and is woken allocates nothing, so consumers such as
// rdmanet can keep their steady state allocation-free.
func TestEVDBlockingWaitDoesNotAllocate(t *testing.T) {
	s := newSide(t, "lo")
	evd, err := s.ia.CreateEVD(4, dat.EVDSoftware)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ack := make(chan struct{})
	go func() {
		defer close(ack)
		for {
			if _, _, err := evd.WaitContext(ctx, 1); err != nil {
				return
			}
			ack <- struct{}{}
		}
	}()
	blocked := func() {
		for {
			if p, _ := evd.Query(); p.Waiting {
				return
			}
			runtime.Gosched()
		}
	}
	const rounds = 1000 // enough that stray allocations of other goroutines (a previous test's teardown) stay far below the bound
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < rounds; i++ {
		blocked()
		time.Sleep(10 * time.Microsecond) // let the waiter reach its select
		require.NoError(t, evd.PostSE(nil))
		<-ack
	}
	runtime.ReadMemStats(&after)
	cancel() // ends the waiter with DAT_INTERRUPTED_CALL
	<-ack
	perWait := float64(after.Mallocs-before.Mallocs) / rounds
	require.Less(t, perWait, 0.1, "allocations per blocking wait")
}
