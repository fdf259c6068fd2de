package iwarp

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine (reader, handshake, accept loop,
// event delivery) outlives the tests of both iwarp and iwarp_test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
