//go:build verbs

package verbsprobe

import (
	"os"
	"testing"
)

func inVM(t *testing.T) {
	if os.Getenv("IN_RDMA_VM") != "1" {
		t.Skip("not inside the RDMA VM (test/vm/run.sh)")
	}
}

func TestDevices(t *testing.T) {
	inVM(t)
	devs, ok := Devices()
	if !ok {
		t.Fatal("ibv_get_device_list failed")
	}
	t.Logf("devices (0 = open, alloc_pd, reg_mr 1 MiB ok): %v", devs)
	for _, want := range []string{"rxe0", "siw0"} {
		rc, seen := devs[want]
		switch {
		case !seen:
			t.Errorf("device %s missing", want)
		case rc != 0:
			t.Errorf("%s: open/alloc_pd/reg_mr failed: %d", want, rc)
		}
	}
}

func TestAddressesBindToTheirDevice(t *testing.T) {
	inVM(t)
	for env, want := range map[string]string{"RDMA_RXE_ADDR": "rxe0", "RDMA_SIW_ADDR": "siw0"} {
		addr := os.Getenv(env)
		if addr == "" {
			t.Errorf("%s not set", env)
			continue
		}
		got, e := BoundDevice(addr)
		if e != 0 {
			t.Errorf("%s=%s: rdma_getaddrinfo/rdma_create_ep failed: %d", env, addr, e)
		} else if got != want {
			t.Errorf("%s=%s bound to %q, want %s", env, addr, got, want)
		} else {
			t.Logf("%s=%s -> %s", env, addr, got)
		}
	}
}
