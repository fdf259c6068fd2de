//go:build verbs && linux && cgo

package verbs

import "sync/atomic"

// inlineWanted is the inline data (max_inline_data) each QP asks for:
// one rdmanet control message (wire.SlotSize, 256 bytes), which carries
// a small Write's bytes itself, so every control Send goes inline where
// the device allows that much.
//
// An inline request's payload is copied into the work request at post
// time: the device reads no registered memory for it (no MR lookup, no
// DMA of the payload on real hardware; rxe and siw copy it in the post
// instead of pinning and mapping user pages at send time), and the
// buffer is the consumer's again when the post returns. Package dat still
// reports the request's completion as for any other.
const inlineWanted = 256

// inlineMin is the smallest inline size worth asking for; a device that
// refuses it gets QPs without inline data.
const inlineMin = 32

// inlineAsk is what the next QP of the IA asks for as max_inline_data.
// A device refuses more than it can hold (EINVAL from QP creation: rxe
// above 400 bytes, siw above 64); the provider then asks for half as
// much, and remembers what worked for the IA's later QPs. Other
// parameters can make creation fail with EINVAL too, so a size counts as
// refused only once a smaller one was accepted with the rest unchanged.
type inlineAsk struct{ refused atomic.Uint32 } // the smallest size refused; 0: none yet

// next returns the size to ask for.
func (a *inlineAsk) next() uint32 {
	if r := a.refused.Load(); r != 0 {
		return inlineBelow(r)
	}
	return inlineWanted
}

// inlineBelow is the size to try after n was refused: half, or none.
func inlineBelow(n uint32) uint32 {
	if n/2 >= inlineMin {
		return n / 2
	}
	return 0
}

// refuse records that the device refused n bytes (n > 0).
func (a *inlineAsk) refuse(n uint32) {
	if n == 0 {
		return
	}
	for {
		r := a.refused.Load()
		if r != 0 && r <= n || a.refused.CompareAndSwap(r, n) {
			return
		}
	}
}
