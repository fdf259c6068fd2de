package iwarp

import "runtime"

// goid returns the calling goroutine's id, parsed from the first line of
// its stack trace ("goroutine 123 [running]:"). It is only used off the
// hot path, to recognise a handler that calls Close, Disconnect or Reset
// of its own QP from the receiver goroutine delivering the completion
// (see receiver.deliver): waiting there for the receiver would deadlock.
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	const prefix = "goroutine "
	if len(b) < len(prefix) {
		return 0
	}
	var id uint64
	for _, c := range b[len(prefix):] {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + uint64(c-'0')
	}
	return id
}
