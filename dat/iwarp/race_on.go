//go:build race

package iwarp

import (
	"runtime"
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
