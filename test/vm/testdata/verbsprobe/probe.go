//go:build verbs

// Package verbsprobe is the VM harness's own self-test (test/vm/suite.sh,
// check "go-selftest"): a cgo test binary built on the host with
// `go test -c -tags verbs` and run in the guest, the same way the project's
// verbs-tagged packages are.  It is a separate module under testdata, so
// `go test ./...` in the main module never sees it.
package verbsprobe

/*
#cgo LDFLAGS: -libverbs -lrdmacm
#include <stdio.h>
#include <stdlib.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

static struct ibv_device *dev_at(struct ibv_device **l, int i) { return l[i]; }

// reg_mr opens dev, allocates a PD and registers len bytes.
static int reg_mr(struct ibv_device *dev, size_t len) {
	struct ibv_context *ctx = ibv_open_device(dev);
	if (!ctx) return -1;
	int rc = 0;
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!pd) { rc = -2; goto out; }
	void *buf = calloc(1, len);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, len,
		IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!mr) rc = -3; else ibv_dereg_mr(mr);
	free(buf);
	ibv_dealloc_pd(pd);
out:
	ibv_close_device(ctx);
	return rc;
}

// bound_device resolves addr (passive, numeric) and binds an rdma_cm id to
// it; returns the name of the device rdma_cm picked, or NULL.
static const char *bound_device(const char *addr, int *err) {
	struct rdma_addrinfo hints = {0}, *res = NULL;
	struct rdma_cm_id *id = NULL;
	static char name[64];
	hints.ai_flags = RAI_PASSIVE | RAI_NUMERICHOST;
	hints.ai_port_space = RDMA_PS_TCP;
	if ((*err = rdma_getaddrinfo(addr, NULL, &hints, &res)) != 0) return NULL;
	if ((*err = rdma_create_ep(&id, res, NULL, NULL)) != 0) { rdma_freeaddrinfo(res); return NULL; }
	name[0] = 0;
	if (id->verbs) snprintf(name, sizeof name, "%s", ibv_get_device_name(id->verbs->device));
	rdma_destroy_ep(id);
	rdma_freeaddrinfo(res);
	return name;
}
*/
import "C"

import "unsafe"

// Devices returns the names of the RDMA devices libibverbs lists and, per
// device, the result of opening it, allocating a PD and registering 1 MiB
// (0 on success).
func Devices() (map[string]int, bool) {
	var n C.int
	l := C.ibv_get_device_list(&n)
	if l == nil {
		return nil, false
	}
	defer C.ibv_free_device_list(l)
	devs := map[string]int{}
	for i := 0; i < int(n); i++ {
		dev := C.dev_at(l, C.int(i))
		devs[C.GoString(C.ibv_get_device_name(dev))] = int(C.reg_mr(dev, 1<<20))
	}
	return devs, true
}

// BoundDevice resolves addr with rdma_getaddrinfo (passive, numeric),
// binds an rdma_cm id to it with rdma_create_ep and returns the name of the
// device rdma_cm picked.
func BoundDevice(addr string) (string, int) {
	cs := C.CString(addr)
	defer C.free(unsafe.Pointer(cs))
	var e C.int
	name := C.bound_device(cs, &e)
	if name == nil {
		return "", int(e)
	}
	return C.GoString(name), 0
}
