//go:build verbs && linux && cgo

package verbs

import (
	"fmt"
	"os"
	"syscall"
)

// fdLoop drives one event fd (a CM event channel, a completion channel or
// a device's async fd) from Go's netpoller: the fd is set non-blocking, a
// duplicate is handed to os.NewFile so epoll waits on it, and one goroutine
// alternates between fetch (take every queued event, inside
// RawConn.Read) and dispatch (hand them to their owners, outside it).
// Nothing spins: the goroutine sleeps in the netpoller while the fd is
// quiet. Closing the duplicate ends the goroutine; the original fd stays
// owned by the C object and is closed when that is destroyed.
//
// fetch must take events until the fd reports EAGAIN (the netpoller is
// edge-triggered) and return whether it took any. dispatch runs without
// the file's read lock, so owners may close objects freely.
type fdLoop struct {
	f    *os.File
	done chan struct{}
}

func startFDLoop(fd int, name string, fetch func() bool, dispatch func()) (*fdLoop, error) {
	if err := syscall.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("verbs: %s: set non-blocking: %w", name, err)
	}
	dup, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
	if e != 0 {
		return nil, fmt.Errorf("verbs: %s: dup: %w", name, e)
	}
	f := os.NewFile(dup, name)
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("verbs: %s: %w", name, err)
	}
	l := &fdLoop{f: f, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for {
			// Returning false from the callback makes Read wait for
			// readability; it returns an error once the file is closed.
			if err := rc.Read(func(uintptr) bool { return fetch() }); err != nil {
				return
			}
			dispatch()
		}
	}()
	return l, nil
}

// stop ends the loop and waits for its goroutine.
func (l *fdLoop) stop() {
	if l == nil {
		return
	}
	l.f.Close()
	<-l.done
}
