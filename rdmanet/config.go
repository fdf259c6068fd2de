package rdmanet

import (
	"github.com/rdmanet/rdmanet/dat"
	"github.com/rdmanet/rdmanet/internal/ring"
)

// Buffer sizes. A connection whose Dialer or ListenConfig leaves
// BufferSize 0 is adaptive (see resize.go): its receive ring and staging
// buffer start at DefaultBufferSize, grow up to MaxBufferSize while the
// round trip limits a stream, and go back when the connection idles. A
// BufferSize fixes both sizes instead.
const (
	// DefaultBufferSize is the receive ring and staging buffer size an
	// adaptive connection starts with and shrinks back to.
	DefaultBufferSize = 16 << 10
	// MaxBufferSize is the largest an adaptive connection's receive ring
	// and staging buffer grow.
	MaxBufferSize = 1 << 20
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
	poll dat.PollPolicy
	// bufSize is the initial ring and staging size; adaptive Conns grow
	// them up to maxBuf (see resize.go), fixed ones keep them.
	bufSize, maxBuf int
	adaptive        bool
	recvs           int
	sendDepth       int
	// noImm keeps data announcements in control Sends even where RDMA
	// Write with Immediate could carry them (Dialer.NoWriteImm).
	noImm bool
}

func newConnConfig(bufSize int, poll dat.PollPolicy) connConfig {
	cfg := connConfig{poll: poll, recvs: defaultRecvs, sendDepth: defaultSendDepth}
	if bufSize <= 0 {
		cfg.adaptive = true
		bufSize = DefaultBufferSize
	}
	bufSize = max(bufSize, minBufferSize)
	cfg.bufSize = (bufSize + pageSize - 1) &^ (pageSize - 1)
	cfg.maxBuf = cfg.bufSize
	if cfg.adaptive {
		cfg.maxBuf = MaxBufferSize
	}
	return cfg
}

// fixedSize is the configured BufferSize: 0 for an adaptive Conn.
func (cfg connConfig) fixedSize() int {
	if cfg.adaptive {
		return 0
	}
	return cfg.bufSize
}

// chunk bounds one reservation of a Write: half the peer's ring, so the
// reader can start on the first half of a large Write while the second is
// being written. (Measured on loopback iWARP with 1 MiB writes: a quarter
// ring cost ~25% throughput in extra control messages, a whole ring
// gained nothing over a half. Between two processes, a quarter, an eighth
// and a sixteenth of the 1 MiB ring made no difference beyond the noise
// at 64 KiB or 1 MiB writes.)
func chunk(peer ring.Ring) uint64 { return max(peer.Size/2, 4096) }
