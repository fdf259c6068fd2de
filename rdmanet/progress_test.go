package rdmanet

// applyQueued applies the events queued on c's EVD without waiting, as a
// Read or Write would on its way in: for tests that look at a Conn's state
// while no Read or Write drives it.
func (c *Conn) applyQueued() {
	if !c.pollMu.TryLock() {
		return
	}
	if c.drainEvents() > 0 {
		c.flushControl()
	}
	c.pollMu.Unlock()
}
