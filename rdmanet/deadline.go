package rdmanet

import (
	"sync"
	"time"
)

// deadline is one direction's I/O deadline as a channel that is closed
// when it passes. Blocked Reads (or Writes) select on the channel, so
// moving the deadline into the past wakes them at once, and setting a new
// deadline after expiry hands out a fresh channel.
//
// One timer per deadline is created on first use and re-armed with Reset
// afterwards; a firing that a later Set made stale checks the time and
// does nothing.
type deadline struct {
	mu      sync.Mutex
	at      time.Time // zero: none
	ch      chan struct{}
	expired bool // ch is closed
	timer   *time.Timer
	kick    func()
}

// init prepares d; kick is called whenever the deadline moves or passes,
// so that a goroutine sleeping on the Conn's events looks at it again.
func (d *deadline) init(kick func()) {
	d.ch = make(chan struct{})
	d.kick = kick
}

// set moves the deadline to t (zero: no deadline).
func (d *deadline) set(t time.Time) {
	d.setLocked(t)
	if d.kick != nil {
		d.kick()
	}
}

func (d *deadline) setLocked(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.at = t
	if d.timer != nil {
		d.timer.Stop()
	}
	if t.IsZero() {
		d.reopen()
		return
	}
	wait := time.Until(t)
	if wait <= 0 {
		d.expire()
		return
	}
	d.reopen()
	if d.timer == nil {
		d.timer = time.AfterFunc(wait, d.fire)
	} else {
		d.timer.Reset(wait)
	}
}

func (d *deadline) fire() {
	d.mu.Lock()
	passed := !d.at.IsZero() && !time.Now().Before(d.at)
	if passed {
		d.expire()
	}
	d.mu.Unlock()
	if passed && d.kick != nil {
		d.kick()
	}
}

func (d *deadline) expire() {
	if !d.expired {
		close(d.ch)
		d.expired = true
	}
}

func (d *deadline) reopen() {
	if d.expired {
		d.ch = make(chan struct{})
		d.expired = false
	}
}

// done returns the channel closed when the current deadline passes.
func (d *deadline) done() <-chan struct{} {
	d.mu.Lock()
	ch := d.ch
	d.mu.Unlock()
	return ch
}

// passed reports whether the deadline has passed.
func (d *deadline) passed() bool {
	d.mu.Lock()
	p := d.expired
	d.mu.Unlock()
	return p
}

// stop releases the timer.
func (d *deadline) stop() {
	d.mu.Lock()
	if d.timer != nil {
		d.timer.Stop()
	}
	d.mu.Unlock()
}
