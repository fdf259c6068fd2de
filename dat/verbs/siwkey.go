//go:build verbs && linux && cgo

package verbs

/*
#include "shim.h"
#include <rdma/siw-abi.h>
*/
import "C"

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// siwVendorID is the vendor_id of the kernel's soft-iWARP driver (siw):
// "bmt" in ASCII.
const siwVendorID = 0x626d74

// siw hands each queue (CQ, SQ, RQ, SRQ) to user space as a mapping of
// the context's command fd at an offset the kernel picks: the first free
// range of pages of the context, lowest first (rdma_user_mmap_entry_insert).
// libsiw checks the offset against SIW_INVAL_UOBJ_KEY, 0x90000, which is
// the offset of page 144 (4 KiB pages): a queue that lands exactly there
// is refused, destroyed, and ibv_create_* fails with errno untouched. Its
// pages are free again, so every later queue whose first fit is page 144
// fails the same way, until something below it is freed. See doc.go.
//
// plugSiwKey therefore makes sure page 144 is covered by a queue of its
// own that starts below it: a 2-page CQ at page 143, kept for as long as
// the context is in use (device.plug). To get it exactly there it first
// fills the free pages below 143 with throwaway CQs, biggest first,
// reading the context's mappings in /proc/self/maps after each step
// rather than predicting them, and destroys the fillers afterwards: their
// pages are good keys for the queues to come.
const (
	siwInvalidKey = C.SIW_INVAL_UOBJ_KEY
	siwCQESize    = C.sizeof_struct_siw_cqe
	siwCQCtrlSize = C.sizeof_struct_siw_cq_ctrl
)

// siwPoisonPage is the page whose offset is siwInvalidKey, or -1 if no
// page starts there.
func siwPoisonPage() int {
	ps := os.Getpagesize()
	if siwInvalidKey%ps != 0 {
		return -1
	}
	return siwInvalidKey / ps
}

// siwCQPages is the number of pages siw maps for a CQ of cqe entries: it
// rounds the entries up to a power of two and adds a control word.
func siwCQPages(cqe int) int {
	n := 1
	for n < cqe {
		n <<= 1
	}
	ps := os.Getpagesize()
	return (n*siwCQESize + siwCQCtrlSize + ps - 1) / ps
}

// siwCQSizes lists, for each number of pages a siw CQ can take up to
// limit, the smallest entry count that takes it, largest first.
func siwCQSizes(maxCQE, limit int) (pages, cqes []int) {
	for cqe := 1; cqe <= maxCQE; cqe <<= 1 {
		p := siwCQPages(cqe)
		if p > limit {
			break
		}
		if len(pages) == 0 || pages[0] != p {
			pages = append([]int{p}, pages...)
			cqes = append([]int{cqe}, cqes...)
		}
	}
	return pages, cqes
}

// plugStep is what plugSiwKey does next, given which pages up to and
// including the poisoned one are taken.
type plugStep int

const (
	plugHeld  plugStep = iota // the poisoned page is taken: nothing to do
	plugNow                   // a 2-page queue made now lands on the page before it
	plugFill                  // fill lower pages first
	plugStuck                 // the page before is taken and the poisoned one free
)

// firstFit is where the kernel puts a queue of n pages: the first run of
// n free pages. Pages past the end of taken are free.
func firstFit(taken []bool, n int) int {
	run := 0
	for p := 0; ; p++ {
		if p < len(taken) && taken[p] {
			run = 0
			continue
		}
		if run++; run == n {
			return p - n + 1
		}
	}
}

// nextPlugStep decides the next step; for plugFill it also returns the
// size (pages, from sizes, largest first) of the filler to make: the
// largest one whose first fit ends below the page before the poisoned
// one. taken has one entry per page up to the poisoned one, the last.
func nextPlugStep(taken []bool, sizes []int) (plugStep, int) {
	poison := len(taken) - 1
	if taken[poison] {
		return plugHeld, 0
	}
	switch p := firstFit(taken, 2); {
	case p == poison-1:
		return plugNow, 2
	case p > poison-1:
		return plugStuck, 0
	}
	for _, s := range sizes {
		if firstFit(taken, s)+s <= poison-1 {
			return plugFill, s
		}
	}
	return plugStuck, 0 // not reached: one page fits below the 2-page hole
}

// mappedPages marks in taken the pages of the context's key space that are
// mapped, from /proc/self/maps: the lines of the file whose device and
// inode are those of the context's command fd. Every siw queue is mapped
// as soon as it is created, so these are exactly the keys in use (other
// contexts on the same device share the inode; a process has one context
// per device through librdmacm).
func mappedPages(maps []byte, dev uint64, ino uint64, taken []bool) {
	ps := uint64(os.Getpagesize())
	want := fmt.Sprintf("%02x:%02x", unix.Major(dev), unix.Minor(dev))
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) < 5 || string(f[3]) != want || string(f[4]) != strconv.FormatUint(ino, 10) {
			continue
		}
		lo, hi, ok := bytes.Cut(f[0], []byte("-"))
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(string(lo), 16, 64)
		end, err2 := strconv.ParseUint(string(hi), 16, 64)
		off, err3 := strconv.ParseUint(string(f[2]), 16, 64)
		if err1 != nil || err2 != nil || err3 != nil || end < start {
			continue
		}
		for p := off / ps; p < (off+end-start+ps-1)/ps && p < uint64(len(taken)); p++ {
			taken[p] = true
		}
	}
}

// siwTaken reads which pages up to the poisoned one the context uses.
func siwTaken(ctx *C.struct_ibv_context, poison int) ([]bool, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(C.shim_cmd_fd(ctx)), &st); err != nil {
		return nil, fmt.Errorf("fstat of the command fd: %w", err)
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil, err
	}
	taken := make([]bool, poison+1)
	mappedPages(maps, st.Dev, st.Ino, taken)
	return taken, nil
}

// plugSiwKey covers the poisoned page of ctx's key space with a CQ of its
// own and returns it (nil if the page is held already or cannot be
// plugged now). See above.
func plugSiwKey(ctx *C.struct_ibv_context, maxCQE int) (*C.struct_ibv_cq, error) {
	poison := siwPoisonPage()
	if poison < 2 {
		return nil, nil
	}
	sizes, cqes := siwCQSizes(maxCQE, poison-1)
	var fillers []*C.struct_ibv_cq
	defer func() {
		for _, f := range fillers {
			C.shim_destroy_cq(f)
		}
	}()
	for range 64 {
		taken, err := siwTaken(ctx, poison)
		if err != nil {
			return nil, err
		}
		step, pages := nextPlugStep(taken, sizes)
		switch step {
		case plugHeld:
			return nil, nil
		case plugStuck:
			return nil, fmt.Errorf("page %d is taken and %d free: nothing can start below it and cover it", poison-1, poison)
		}
		cqe := 0
		for i, p := range sizes {
			if p == pages {
				cqe = cqes[i]
			}
		}
		var cq *C.struct_ibv_cq
		if rc := C.shim_create_cq(ctx, C.int(cqe), nil, &cq); rc != 0 {
			return nil, fmt.Errorf("ibv_create_cq(%d) for %d pages: %w", cqe, pages, errnoOf(rc))
		}
		if step == plugNow {
			after, err := siwTaken(ctx, poison)
			if err != nil {
				C.shim_destroy_cq(cq)
				return nil, err
			}
			if after[poison] {
				return cq, nil
			}
			// Something else took the page first: try again.
		}
		fillers = append(fillers, cq)
	}
	return nil, fmt.Errorf("no plug after %d steps", 64)
}
