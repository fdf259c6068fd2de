package dat

import "time"

// SetHookBeforeEstablished sets testHookBeforeEstablished for a test and
// returns the function that clears it.
func SetHookBeforeEstablished(f func()) (restore func()) {
	testHookBeforeEstablished = f
	return func() { testHookBeforeEstablished = nil }
}

// SpinBackoff is the EVD's current adaptive back-off (spinBackoff).
func (e *EVD) SpinBackoff() uint32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.spinBackoff
}

// SetSpinAdvice makes ia's provider advise a spin of d (IAAttr.Spin),
// for a test that needs a provider advising a spin or none.
func SetSpinAdvice(ia *IA, d time.Duration) {
	ia.attr.Spin = d
}

// NoProgress makes e's waiters spin on polls alone, as on a provider
// whose CQs are no driver.CQProgresser: for a test of the spin itself
// on an EVD whose CQ no connection feeds (where iwarp's Progress would
// end every spin at once).
func NoProgress(e *EVD) {
	e.prog = nil
}

// FreshSpinBackoff is ia's adaptive back-off for EVDs that have not spun
// yet (IA.freshSpin).
func FreshSpinBackoff(ia *IA) uint32 { return ia.freshSpin.backoff.Load() }

// WarmUp is how many quick waits a fresh EVD makes before it may spin.
const WarmUp = warmUp
