//go:build race

package iwarp

import (
	"net"
	"runtime"
	"sync"
	"unsafe"
)

// raceRead and raceWrite tell the race detector about memory the kernel
// reads or writes in the raw writev/readv calls, so that -race still sees
// a consumer touching a buffer the data path is using.
func raceRead(b []byte) {
	if len(b) > 0 {
		runtime.RaceReadRange(unsafe.Pointer(&b[0]), len(b))
	}
}

func raceWrite(b []byte) {
	if len(b) > 0 {
		runtime.RaceWriteRange(unsafe.Pointer(&b[0]), len(b))
	}
}

// Stream clocks teach the race detector what TCP guarantees when both
// ends of a connection are in this process (loopback tests, a program
// talking to itself): whatever the writer did before it handed bytes to
// the socket happens before whatever the reader does after it read them.
// Without them, a test that checks memory, then posts a request whose
// peer overwrites that memory, is reported as a race although the wire
// orders the two. The writer releases the clock of its direction of the
// stream before each write; the reader acquires it after each read (a
// slight over-approximation: it may not have read the last write's bytes
// yet). Each direction is keyed by its source and destination address,
// which both ends see swapped.
var streamClocks sync.Map // "src>dst" -> *byte

// raceClocks returns the clocks of a connection's two directions and a
// function that forgets them once the connection is over.
func raceClocks(local, remote net.Addr) (tx, rx *byte, forget func()) {
	txKey := local.String() + ">" + remote.String()
	rxKey := remote.String() + ">" + local.String()
	t, _ := streamClocks.LoadOrStore(txKey, new(byte))
	r, _ := streamClocks.LoadOrStore(rxKey, new(byte))
	// An end that is done forgets both directions; the other end, if it
	// is in this process, keeps the pointers it took.
	return t.(*byte), r.(*byte), func() {
		streamClocks.CompareAndDelete(txKey, t)
		streamClocks.CompareAndDelete(rxKey, r)
	}
}

func raceRelease(clock *byte) {
	if clock != nil {
		runtime.RaceReleaseMerge(unsafe.Pointer(clock))
	}
}

func raceAcquire(clock *byte) {
	if clock != nil {
		runtime.RaceAcquire(unsafe.Pointer(clock))
	}
}
