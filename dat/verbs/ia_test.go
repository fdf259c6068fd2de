//go:build verbs && linux && cgo

package verbs

import (
	"context"
	"errors"
	"net"
	"testing"
	"unsafe"

	"github.com/rdmanet/rdmanet/dat/driver"
)

func TestOpenAttr(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		for _, arg := range [][]string{{d.addr}, {d.ifname, "0"}} {
			ia, err := Driver{}.Open(context.Background(), arg)
			if err != nil {
				t.Fatalf("open %q: %v", arg, err)
			}
			a := ia.Attr()
			t.Logf("open %q: %+v", arg, a)
			if a.Transport != d.transport {
				t.Errorf("transport %v, want %v", a.Transport, d.transport)
			}
			wantPD := maxPrivateDataIB
			if d.transport == driver.TransportIWARP {
				wantPD = maxPrivateDataIWARP
				if a.MaxReadSGE != 1 {
					t.Errorf("siw MaxReadSGE %d, want 1", a.MaxReadSGE)
				}
			}
			pd, err := ia.AllocPD()
			if err != nil {
				t.Fatal(err)
			}
			if _, w := pd.(driver.WindowAllocator); w != (d.transport != driver.TransportIWARP) {
				t.Errorf("PD offers memory windows: %v, want them on rxe only", w)
			}
			pd.Close()
			if _, ok := ia.(driver.SRQCreator); !ok {
				t.Error("the IA offers no SRQs")
			}
			if a.MaxPrivateData != wantPD {
				t.Errorf("MaxPrivateData %d, want %d", a.MaxPrivateData, wantPD)
			}
			if a.MaxQPs <= 0 || a.MaxWRPerQP <= 0 || a.MaxSGE <= 0 || a.MaxIRD <= 0 || a.MaxORD <= 0 ||
				a.MaxMessageSize == 0 || a.MaxRDMASize == 0 || a.MaxSRQWR <= 0 || a.MaxMR <= 0 || a.MaxMRSize == 0 {
				t.Errorf("implausible limits %+v", a)
			}
			if la := a.LocalAddr.(*net.TCPAddr); la.IP.String() != d.addr {
				t.Errorf("LocalAddr %v, want %s", la, d.addr)
			}
			if err := ia.Close(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestOpenBadAddress(t *testing.T) {
	testDevices(t)
	for _, arg := range []string{"203.0.113.77", "no-such-if0", "0.0.0.0", "127.0.0.1"} {
		ia, err := Driver{}.Open(context.Background(), []string{arg})
		if err == nil {
			ia.Close()
			t.Errorf("open %s: no error", arg)
			continue
		}
		if !errors.Is(err, driver.ErrInvalidAddress) {
			t.Errorf("open %s: %v, want ErrInvalidAddress", arg, err)
		}
	}
	if _, err := (Driver{}).Open(context.Background(), nil); err == nil {
		t.Error("open without arguments: no error")
	}
}

func TestTwoIAsOneAddress(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		a, b := openTestIA(t, d), openTestIA(t, d)
		if a.ctx != b.ctx || a.dev != b.dev {
			t.Error("two IAs on one device do not share the device's context and async loop")
		}
		l := listenOn(t, a, driver.ListenConfig{})
		port := uint16(l.Addr().(*net.TCPAddr).Port)
		if _, err := b.Listen(driver.ListenConfig{Port: port}); !errors.Is(err, driver.ErrPortInUse) {
			t.Errorf("second listener on port %d: %v, want ErrPortInUse", port, err)
		}
		if _, err := b.Listen(driver.ListenConfig{SharePort: true}); !errors.Is(err, driver.ErrNotSupported) {
			t.Errorf("SharePort: %v, want ErrNotSupported", err)
		}
	})
}

func TestRegister(t *testing.T) {
	forEachDevice(t, func(t *testing.T, d testDev) {
		ia := openTestIA(t, d)
		pd, err := ia.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		defer pd.Close()
		heap := make([]byte, 3000)
		region, err := AllocRegion(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		defer FreeRegion(region)
		for _, tc := range []struct {
			name string
			buf  []byte
			acc  driver.Access
		}{
			{"heap local", heap, 0},
			{"heap remote write", heap[10:], driver.AccessRemoteWrite},
			{"mmap all", region, driver.AccessLocalWrite | driver.AccessRemoteWrite | driver.AccessRemoteRead},
		} {
			mr, err := pd.Register(tc.buf, tc.acc)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if got, want := mr.Addr(), uint64(uintptr(unsafe.Pointer(&tc.buf[0]))); got != want {
				t.Errorf("%s: Addr %#x, want %#x", tc.name, got, want)
			}
			if tc.acc&(driver.AccessRemoteWrite|driver.AccessRemoteRead) != 0 && mr.RKey() == 0 && mr.LKey() == 0 {
				t.Errorf("%s: zero keys", tc.name)
			}
			if err := mr.Close(); err != nil {
				t.Errorf("%s: close: %v", tc.name, err)
			}
		}
		if _, err := pd.Register(nil, 0); err == nil {
			t.Error("zero-length registration: no error")
		}
	})
}
