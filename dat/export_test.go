package dat

// SetHookBeforeEstablished sets testHookBeforeEstablished for a test and
// returns the function that clears it.
func SetHookBeforeEstablished(f func()) (restore func()) {
	testHookBeforeEstablished = f
	return func() { testHookBeforeEstablished = nil }
}
