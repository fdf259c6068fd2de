//go:build verbs && linux && cgo

package verbs

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// Many small queues on one context: on siw each of these CQs is one page
// of the context's mmap key space, so without the plug of siwkey.go the
// one that lands on libsiw's invalid key (page 144) and every later one
// would fail, without an errno.
func TestManySmallCQs(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		ia := openTestIA(t, d)
		const n = 300
		cqs := make([]driver.CQ, 0, n)
		defer func() {
			for _, cq := range cqs {
				cq.Close()
			}
		}()
		for i := range n {
			cq, err := ia.CreateCQ(driver.CQConfig{Size: 1})
			if err != nil {
				t.Fatalf("CQ %d of %d: %v", i+1, n, err)
			}
			cqs = append(cqs, cq)
		}
		if d.name != "siw" {
			return
		}
		if ia.dev.plug == nil {
			t.Fatal("no plug on the siw context")
		}
		poison := siwPoisonPage()
		taken, err := siwTaken(ia.ctx, poison)
		if err != nil {
			t.Fatal(err)
		}
		if !taken[poison] || !taken[poison-1] {
			t.Fatalf("pages %d and %d: taken %v, %v; want the plug on both", poison-1, poison, taken[poison-1], taken[poison])
		}
	})
}

// A local failure carries the device's own errno and reads as a resource
// problem of this side, never as the peer's refusal: memory the kernel
// cannot pin (a page without access rights) and a QP beyond the device's
// SGE limit, which only the kernel refuses (CreateQP's checks are
// bypassed here).
func TestLocalErrors(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		ia := openTestIA(t, d)
		dpd, pd := allocPD(t, ia)

		t.Run("Register", func(t *testing.T) {
			ps := unix.Getpagesize()
			b, err := unix.Mmap(-1, 0, 2*ps, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Munmap(b)
			if err := unix.Mprotect(b[ps:], unix.PROT_NONE); err != nil {
				t.Fatal(err)
			}
			mr, err := pd.Register(unsafe.Slice(&b[0], 2*ps), driver.AccessLocalWrite)
			if err == nil {
				mr.Close()
				t.Fatal("registered a page without access rights")
			}
			checkLocal(t, err, syscall.EFAULT)
		})

		t.Run("CreateQP", func(t *testing.T) {
			cq, err := ia.CreateCQ(driver.CQConfig{Size: 64})
			if err != nil {
				t.Fatal(err)
			}
			defer cq.Close()
			cfg := defaultQPConfig(dpd)
			cfg.SendCQ, cfg.RecvCQ = cq, cq
			cfg.MaxSendSGE = ia.attr.MaxSGE + 1
			q := newQP(ia, cfg)
			defer q.Close()
			// The QP is created once the route to the peer is known;
			// nobody needs to listen.
			_, err = q.Connect(testCtx(t), &net.TCPAddr{IP: ia.ip, Port: unusedPort(t, ia)}, nil)
			if err == nil {
				t.Fatalf("connected a QP with %d send SGEs", cfg.MaxSendSGE)
			}
			checkLocal(t, err, syscall.EINVAL)
		})
	})
}

// checkLocal checks that err is a local resource error with errno want.
func checkLocal(t *testing.T, err error, want syscall.Errno) {
	t.Helper()
	t.Logf("error: %v", err)
	var errno syscall.Errno
	switch {
	case !errors.As(err, &errno):
		t.Errorf("no errno in the chain")
	case errno != want:
		t.Errorf("errno %d (%v), want %v", errno, errno, want)
	}
	if !errors.Is(err, driver.ErrResources) {
		t.Errorf("not driver.ErrResources")
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, driver.ErrUnreachable) || errors.Is(err, ErrNoErrno) {
		t.Errorf("reads as a refusal, the network's or errno-less")
	}
}
