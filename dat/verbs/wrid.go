//go:build verbs && linux && cgo

package verbs

import (
	"fmt"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// The wr_id a work request carries through the device.
//
// Package dat's IDs must come back unchanged, and two things must be told
// apart on every work completion that the ID alone cannot say:
//
//   - Which queue it belongs to. Package dat picks the queue by the
//     Completion's Op, and a failed or flushed verbs completion has no
//     valid opcode, while one CQ may serve both queues of a QP.
//   - Whether it is the provider's own request (a window bind, a
//     keepalive probe): those never reach package dat.
//
// Package dat keeps every ID below driver.MaxWRID (2^62), which leaves
// the top two bits to the provider. Bit 63 clear: the low 62 bits are
// dat's ID and bit 62 says "receive" (QP receive queue or SRQ). Bit 63
// set: a provider request, whose kind sits in bits 56..61 and whose index
// in bits 0..55. The two ranges cannot meet, so the data path is one OR
// on posting and one mask and one compare on completion.
const (
	wrHandle   = 1 << 63
	wrRecvBit  = 1 << 62
	wrIDMask   = wrRecvBit - 1
	wrKindBits = 56
	wrIdxMask  = 1<<wrKindBits - 1
)

// The provider's own request kinds.
const (
	wrBind  = 1 // a window bind; index: the QP's bind number
	wrProbe = 2 // a keepalive probe; index: the keeper's probe number
	// wrQuiet is package dat's request posted unsignalled; index: dat's
	// ID. It completes only when it fails or is flushed, and is not
	// counted in QP.sendPosted (post.go). An ID above wrIdxMask (2^56
	// requests on one queue) is posted signalled instead.
	wrQuiet = 3
	// wrDrain is the signalled marker a graceful disconnect posts behind
	// an unsignalled request (waitSendIdle); index: 0.
	wrDrain = 4
)

// Package dat's IDs leave the provider's bits free.
var _ = [1]struct{}{}[driver.MaxWRID-wrRecvBit]

func wrHandleOf(kind, idx uint64) uint64 { return wrHandle | kind<<wrKindBits | idx&wrIdxMask }

func wrKind(w uint64) uint64 { return w &^ wrHandle >> wrKindBits }

// encodeWRID returns the wr_id to post for dat's id on a queue (recv:
// the receive queue or SRQ). An id at or above driver.MaxWRID breaks
// package dat's promise and is refused rather than mistaken for another.
func encodeWRID(id uint64, recv bool) (uint64, error) {
	if id >= driver.MaxWRID {
		return 0, fmt.Errorf("verbs: work request ID %#x is not below driver.MaxWRID", id)
	}
	if recv {
		return id | wrRecvBit, nil
	}
	return id, nil
}
