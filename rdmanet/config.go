package rdmanet

import (
	"github.com/rdmanet/rdmanet/dat"
	"github.com/rdmanet/rdmanet/internal/ring"
)

// Defaults. The buffer size was chosen by measurement (BenchmarkThroughput
// with RDMANET_BENCH_BUF on loopback iWARP, 2 cores, 2 MiB L2): 128 KiB
// rings were ~20% slower with 1 MiB writes; 512 KiB and 1 MiB were slower
// with 64 KiB writes (about half: ring plus staging no longer stay in
// cache) and no better with 1 MiB writes. Every connection maps its ring
// and its staging buffer, so 256 KiB each is also the cheapest setting
// that keeps up with TCP.
const (
	// DefaultBufferSize is the receive ring size and the staging buffer
	// size of a connection when the Dialer or ListenConfig does not say.
	DefaultBufferSize = 256 << 10
	// minBufferSize bounds BufferSize from below (the handshake's minimum
	// ring).
	minBufferSize = 4096

	// defaultRecvs is K, the control receives each side keeps posted (and
	// the initial credits it announces).
	defaultRecvs = 32
	// defaultSendDepth is the send queue depth: RDMA Writes and control
	// Sends outstanding at once. It also sizes the control send slots.
	defaultSendDepth = 64
)

// connConfig is what one connection is built with.
type connConfig struct {
	poll      dat.PollPolicy
	bufSize   int
	recvs     int
	sendDepth int
}

func newConnConfig(bufSize int, poll dat.PollPolicy) connConfig {
	if bufSize <= 0 {
		bufSize = DefaultBufferSize
	}
	bufSize = max(bufSize, minBufferSize)
	bufSize = (bufSize + pageSize - 1) &^ (pageSize - 1)
	return connConfig{
		poll: poll, bufSize: bufSize, recvs: defaultRecvs, sendDepth: defaultSendDepth,
	}
}

// chunk bounds one reservation of a Write: half the peer's ring, so the
// reader can start on the first half of a large Write while the second is
// being written. (Measured on loopback iWARP with 1 MiB writes: a quarter
// ring cost ~25% throughput in extra control messages, a whole ring
// gained nothing over a half.)
func chunk(peer ring.Ring) uint64 { return max(peer.Size/2, 4096) }
