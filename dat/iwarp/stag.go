package iwarp

import (
	"math/rand/v2"
	"sync"
)

// maxMRs bounds the registered regions of one IA. STags are
// index<<8 | key with a 24-bit index (siw's scheme), so at most 1<<24-1
// indices exist; a million regions is already far beyond any consumer.
const maxMRs = 1 << 20

// stagTable hands out STags and maps them back to regions for the data
// path. Index 0 is never used, so no STag is 0 (which some hardware treats
// specially) or 1 (the STag of siw's zero-length RTR Write). Freed indices
// are reused oldest-first and get a fresh random key, so a stale STag from
// a peer is unlikely to hit a new region.
type stagTable struct {
	mu   sync.Mutex
	max  int
	next uint32 // next never-used index
	free []uint32
	mrs  map[uint32]*MR // by index
}

func newSTagTable(max int) *stagTable {
	return &stagTable{max: max, next: 1, mrs: make(map[uint32]*MR)}
}

// alloc assigns mr an STag (setting mr.stag); ok is false when the table
// is full.
func (t *stagTable) alloc(mr *MR) (stag uint32, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.mrs) >= t.max {
		return 0, false
	}
	var idx uint32
	// Prefer fresh indices while they last so that reuse is rare.
	if int(t.next) <= t.max && t.next < 1<<24 {
		idx = t.next
		t.next++
	} else {
		idx = t.free[0]
		t.free = t.free[1:]
	}
	// mr.stag is set under the table's lock: lookup reads it under the
	// same lock from the receive path, which may run as soon as the entry
	// is in the map.
	mr.stag = idx<<8 | uint32(rand.N(256))
	t.mrs[idx] = mr
	return mr.stag, true
}

// release frees stag's index.
func (t *stagTable) release(stag uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	idx := stag >> 8
	if mr, ok := t.mrs[idx]; ok && mr.stag == stag {
		delete(t.mrs, idx)
		t.free = append(t.free, idx)
	}
}

// lookup returns the live region named by stag, or nil.
func (t *stagTable) lookup(stag uint32) *MR {
	t.mu.Lock()
	defer t.mu.Unlock()
	if mr, ok := t.mrs[stag>>8]; ok && mr.stag == stag {
		return mr
	}
	return nil
}
