//go:build verbs && linux && cgo

package verbs

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// These run on any host that builds the package: no device needed.

// The page arithmetic of siw's CQ mappings: 32-byte entries, a power of
// two of them, and an 8-byte control word.
func TestSiwCQPages(t *testing.T) {
	if os.Getpagesize() != 4096 {
		t.Skip("the figures are for 4 KiB pages")
	}
	if p := siwPoisonPage(); p != 144 {
		t.Fatalf("poisoned page %d, want 144 (0x90000)", p)
	}
	for cqe, want := range map[int]int{1: 1, 64: 1, 65: 2, 112: 2, 128: 2, 129: 3, 4096: 33, 16384: 129} {
		if got := siwCQPages(cqe); got != want {
			t.Errorf("siwCQPages(%d) = %d, want %d", cqe, got, want)
		}
	}
	pages, cqes := siwCQSizes(3276800, 143)
	if fmt.Sprint(pages) != "[129 65 33 17 9 5 3 2 1]" || fmt.Sprint(cqes) != "[16384 8192 4096 2048 1024 512 256 128 1]" {
		t.Errorf("siwCQSizes: pages %v, entries %v", pages, cqes)
	}
}

// space is a context's key space as the kernel allocates it: first fit,
// lowest pages first.
type space struct {
	taken map[int]bool
}

func (s *space) alloc(n int) int {
	for p := 0; ; p++ {
		free := true
		for i := p; i < p+n; i++ {
			if s.taken[i] {
				free = false
				break
			}
		}
		if free {
			for i := p; i < p+n; i++ {
				s.taken[i] = true
			}
			return p
		}
	}
}

func (s *space) free(p, n int) {
	for i := p; i < p+n; i++ {
		delete(s.taken, i)
	}
}

func (s *space) view(poison int) []bool {
	v := make([]bool, poison+1)
	for p := range v {
		v[p] = s.taken[p]
	}
	return v
}

// plug runs plugSiwKey's loop against s: it reports where the plug went
// (-1: none) and frees the fillers, as plugSiwKey does.
func (s *space) plug(t *testing.T, poison int, sizes []int) int {
	t.Helper()
	type obj struct{ p, n int }
	var fillers []obj
	defer func() {
		for _, f := range fillers {
			s.free(f.p, f.n)
		}
	}()
	for range 64 {
		step, n := nextPlugStep(s.view(poison), sizes)
		switch step {
		case plugHeld, plugStuck:
			return -1
		case plugNow:
			p := s.alloc(n)
			if p == poison {
				t.Fatalf("the plug itself landed on the poisoned page")
			}
			return p
		}
		p := s.alloc(n)
		if p+n > poison-1 {
			t.Fatalf("a %d-page filler went to %d, up to the poisoned page %d", n, p, poison)
		}
		fillers = append(fillers, obj{p, n})
	}
	t.Fatal("no plug after 64 steps")
	return -1
}

// On a fresh context the plug takes pages 143 and 144 after three
// fillers, and whatever comes later never starts on 144. Around queues
// already there (holes anywhere below), it still lands right before the
// poisoned page, or reports that it cannot.
func TestPlugPlan(t *testing.T) {
	const poison = 144
	sizes, _ := siwCQSizes(3276800, poison-1)

	s := &space{taken: map[int]bool{}}
	if p := s.plug(t, poison, sizes); p != poison-1 {
		t.Fatalf("fresh context: plug at %d, want %d", p, poison-1)
	}
	if len(s.taken) != 2 {
		t.Fatalf("fillers left behind: %d pages taken", len(s.taken))
	}
	// rdmanet's queues on siw: CQ 2 pages, SQ 2, RQ 1.
	for range 200 {
		for _, n := range []int{2, 2, 1} {
			if p := s.alloc(n); p == poison {
				t.Fatalf("a queue landed on the poisoned page")
			}
		}
	}

	r := rand.New(rand.NewPCG(1, 2))
	for round := range 500 {
		s := &space{taken: map[int]bool{}}
		type obj struct{ p, n int }
		var objs []obj
		for range r.IntN(120) {
			n := 1 + r.IntN(6)
			objs = append(objs, obj{s.alloc(n), n})
		}
		for _, o := range objs {
			if r.IntN(3) == 0 {
				s.free(o.p, o.n)
			}
		}
		before := s.view(poison)
		p := s.plug(t, poison, sizes)
		switch {
		case before[poison]:
			if p != -1 {
				t.Fatalf("round %d: plugged a page already held", round)
			}
		case before[poison-1]:
			if p != -1 {
				t.Fatalf("round %d: plugged at %d with page %d held", round, p, poison-1)
			}
		default:
			if p != poison-1 {
				t.Fatalf("round %d: plug at %d, want %d", round, p, poison-1)
			}
		}
	}
}

// mappedPages reads exactly the mappings of the command fd's file.
func TestMappedPages(t *testing.T) {
	dev := unix.Mkdev(0, 5)
	maps := []byte(`7f18dce20000-7f18dce21000 rw-s 0012f000 00:05 107                        /dev/infiniband/uverbs1
7f18dce4f000-7f18dce53000 rw-s 00005000 00:05 107                        /dev/infiniband/uverbs1
7f18dce53000-7f18dce55000 rw-s 00000000 00:05 108                        /dev/infiniband/uverbs0
7f18dce55000-7f18dce57000 rw-p 00000000 00:06 107                        /somewhere/else
7f18dcf6c000-7f18dcf6e000 rw-s 0008f000 00:05 107                        /dev/infiniband/uverbs1
`)
	taken := make([]bool, 145)
	mappedPages(maps, dev, 107, taken)
	var got []int
	for p, ok := range taken {
		if ok {
			got = append(got, p)
		}
	}
	if fmt.Sprint(got) != "[5 6 7 8 143 144]" {
		t.Fatalf("taken pages %v", got)
	}
}
