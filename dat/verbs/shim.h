//go:build verbs && linux && cgo

// shim.h: the only C in package verbs. Small static inline wrappers so
// that Go never calls a header macro or inline directly, never passes a Go
// pointer that C keeps, and gets errors back as negative errno values.
//
// Rules every wrapper follows:
//   * A wrapper that reports failure through errno clears errno before the
//     call, so a value left over from an earlier call on the thread is
//     never reported as this call's cause; a call that fails without
//     setting errno (libsiw does) is reported as -SHIM_NO_ERRNO.
//   * Go keys (registry handles, plain integers) travel as uintptr_t and
//     are stored in C context fields; no Go pointer is ever stored in C.
//   * Buffers passed from Go (private data, SGE arrays, out-structs) are
//     read or written only during the call.
//   * An event taken from a channel is copied and acknowledged inside the
//     same call, so rdma_destroy_id/ibv_destroy_cq never wait on Go code.

#ifndef RDMANET_VERBS_SHIM_H
#define RDMANET_VERBS_SHIM_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

// The largest private data any CM event can carry to user space
// (RDMA_MAX_PRIVATE_DATA).
#define SHIM_PDATA_MAX 256

// SHIM_NO_ERRNO is what a wrapper returns, negated, for a call that
// failed and left errno at 0. It is far above any errno value.
#define SHIM_NO_ERRNO 0x10000

// shim_err is the failure of a call that reports it in errno, which the
// wrapper cleared before the call.
static inline int shim_err(void) { return errno ? -errno : -SHIM_NO_ERRNO; }

// shim_ret normalises the return of calls documented to return an errno
// value (ibv_post_*, ibv_modify_*, ibv_destroy_*) but whose providers
// sometimes return a negative errno or -1 with errno set: 0 or -errno.
// Callers clear errno before the call.
static inline int shim_ret(int r) {
	if (r == 0)
		return 0;
	if (r == -1)
		return shim_err();
	return r > 0 ? -r : r;
}

// shim_test_silent_call fails like libsiw's create calls: -1, errno
// untouched.
static inline int shim_test_silent_call(void) { return -1; }

// shim_test_silent_failure follows the wrappers' pattern around a call
// that fails without setting errno, on a thread where an earlier call left
// errno at stale. For the package's tests: the result must be
// -SHIM_NO_ERRNO, never -stale.
static inline int shim_test_silent_failure(int stale) {
	errno = stale;
	errno = 0;
	return shim_test_silent_call() ? shim_err() : 0;
}

// ---------------------------------------------------------------- addresses

// shim_sockaddr fills ss from a 4- or 16-byte IP and a host-order port.
static inline void shim_sockaddr(struct sockaddr_storage *ss, const uint8_t *ip, int iplen, uint16_t port) {
	memset(ss, 0, sizeof *ss);
	if (iplen == 4) {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;
		s->sin_family = AF_INET;
		s->sin_port = htons(port);
		memcpy(&s->sin_addr, ip, 4);
	} else {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
		s->sin6_family = AF_INET6;
		s->sin6_port = htons(port);
		memcpy(&s->sin6_addr, ip, 16);
	}
}

// shim_id_addr copies the local (remote=0) or peer address of id into
// ip/port and returns the IP length (4, 16, or 0 if unset).
static inline int shim_id_addr(struct rdma_cm_id *id, int remote, uint8_t *ip, uint16_t *port) {
	struct sockaddr *sa = remote ? rdma_get_peer_addr(id) : rdma_get_local_addr(id);
	if (sa->sa_family == AF_INET) {
		struct sockaddr_in *s = (struct sockaddr_in *)sa;
		memcpy(ip, &s->sin_addr, 4);
		*port = ntohs(s->sin_port);
		return 4;
	}
	if (sa->sa_family == AF_INET6) {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)sa;
		memcpy(ip, &s->sin6_addr, 16);
		*port = ntohs(s->sin6_port);
		return 16;
	}
	return 0;
}

// ---------------------------------------------------------------- CM ids

static inline int shim_create_event_channel(struct rdma_event_channel **ch) {
	errno = 0;
	*ch = rdma_create_event_channel();
	return *ch ? 0 : shim_err();
}

static inline int shim_create_id(struct rdma_event_channel *ch, struct rdma_cm_id **id, uintptr_t key) {
	errno = 0;
	return rdma_create_id(ch, id, (void *)key, RDMA_PS_TCP) ? shim_err() : 0;
}

static inline int shim_bind(struct rdma_cm_id *id, const uint8_t *ip, int iplen, uint16_t port) {
	struct sockaddr_storage ss;
	shim_sockaddr(&ss, ip, iplen, port);
	errno = 0;
	return rdma_bind_addr(id, (struct sockaddr *)&ss) ? shim_err() : 0;
}

static inline int shim_resolve_addr(struct rdma_cm_id *id, const uint8_t *sip, int siplen,
                                    const uint8_t *dip, int diplen, uint16_t dport, int ms) {
	struct sockaddr_storage src, dst;
	shim_sockaddr(&src, sip, siplen, 0);
	shim_sockaddr(&dst, dip, diplen, dport);
	errno = 0;
	return rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, ms) ? shim_err() : 0;
}

static inline int shim_resolve_route(struct rdma_cm_id *id, int ms) {
	errno = 0;
	return rdma_resolve_route(id, ms) ? shim_err() : 0;
}

static inline int shim_listen(struct rdma_cm_id *id, int backlog) {
	errno = 0;
	return rdma_listen(id, backlog) ? shim_err() : 0;
}

static inline void shim_conn_param(struct rdma_conn_param *p, const void *pd, int pdlen, int ird, int ord) {
	memset(p, 0, sizeof *p);
	p->private_data = pdlen ? pd : NULL;
	p->private_data_len = (uint8_t)pdlen;
	p->responder_resources = (uint8_t)ird;
	p->initiator_depth = (uint8_t)ord;
	p->flow_control = 1;
	p->retry_count = 7;     // IB 3-bit maximum (DAPL IB_RC_RETRY_COUNT)
	p->rnr_retry_count = 7; // 7 = retry forever on RNR NAK
}

static inline int shim_connect(struct rdma_cm_id *id, const void *pd, int pdlen, int ird, int ord) {
	struct rdma_conn_param p;
	shim_conn_param(&p, pd, pdlen, ird, ord);
	errno = 0;
	return rdma_connect(id, &p) ? shim_err() : 0;
}

static inline int shim_accept(struct rdma_cm_id *id, const void *pd, int pdlen, int ird, int ord) {
	struct rdma_conn_param p;
	shim_conn_param(&p, pd, pdlen, ird, ord);
	errno = 0;
	return rdma_accept(id, &p) ? shim_err() : 0;
}

// shim_reject refuses a request. nonpeer uses the IB reject reason 35
// (vendor option not supported, rdma_reject_ece) instead of 28 (consumer
// defined), so that the initiator can tell a provider refusal from a
// consumer's; iWARP carries no reason either way.
static inline int shim_reject(struct rdma_cm_id *id, const void *pd, int pdlen, int nonpeer) {
	const void *p = pdlen ? pd : NULL;
	int rc;
	errno = 0;
	rc = nonpeer ? rdma_reject_ece(id, p, (uint8_t)pdlen) : rdma_reject(id, p, (uint8_t)pdlen);
	return rc ? shim_err() : 0;
}

static inline int shim_disconnect(struct rdma_cm_id *id) {
	errno = 0;
	return rdma_disconnect(id) ? shim_err() : 0;
}

static inline int shim_destroy_id(struct rdma_cm_id *id) {
	errno = 0;
	return rdma_destroy_id(id) ? shim_err() : 0;
}

static inline uint16_t shim_src_port(struct rdma_cm_id *id) {
	return ntohs(rdma_get_src_port(id));
}

// ---------------------------------------------------------------- CM events

struct shim_cm_event {
	int type;
	int status;
	uintptr_t key;        // context of the id the event is for
	uintptr_t listen_key; // context of the listening id (CONNECT_REQUEST)
	struct rdma_cm_id *id;
	uint8_t responder_resources;
	uint8_t initiator_depth;
	int pdata_len;
	uint8_t pdata[SHIM_PDATA_MAX];
};

// shim_next_cm_event takes one event off ch, copies it into out and acks it.
// A CONNECT_REQUEST's new id gets context new_key before it is acked, so
// every later event of that id names its own owner, not the listener's.
// Returns 0, or -errno (-EAGAIN: none queued).
static inline int shim_next_cm_event(struct rdma_event_channel *ch, struct shim_cm_event *out, uintptr_t new_key) {
	struct rdma_cm_event *e;
	errno = 0;
	if (rdma_get_cm_event(ch, &e))
		return shim_err();
	memset(out, 0, offsetof(struct shim_cm_event, pdata));
	out->type = e->event;
	out->status = e->status;
	out->id = e->id;
	if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
		e->id->context = (void *)new_key;
		out->listen_key = e->listen_id ? (uintptr_t)e->listen_id->context : 0;
	}
	out->key = (uintptr_t)e->id->context;
	switch (e->event) {
	case RDMA_CM_EVENT_CONNECT_REQUEST:
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
	case RDMA_CM_EVENT_ESTABLISHED:
	case RDMA_CM_EVENT_REJECTED: {
		int n = e->param.conn.private_data_len;
		if (n > SHIM_PDATA_MAX)
			n = SHIM_PDATA_MAX;
		if (!e->param.conn.private_data)
			n = 0;
		if (n)
			memcpy(out->pdata, e->param.conn.private_data, n);
		out->pdata_len = n;
		out->responder_resources = e->param.conn.responder_resources;
		out->initiator_depth = e->param.conn.initiator_depth;
		break;
	}
	default:
		break;
	}
	rdma_ack_cm_event(e);
	return 0;
}

// ---------------------------------------------------------------- device

static inline int shim_query(struct ibv_context *ctx, uint8_t port, struct ibv_device_attr *da, struct ibv_port_attr *pa) {
	int rc;
	errno = 0;
	rc = shim_ret(ibv_query_device(ctx, da));
	if (rc)
		return rc;
	errno = 0;
	return shim_ret(ibv_query_port(ctx, port, pa));
}

// shim_vendor reads the device's vendor_id and max_cqe.
static inline int shim_vendor(struct ibv_context *ctx, uint32_t *vendor_id, int *max_cqe) {
	struct ibv_device_attr da;
	int rc;
	errno = 0;
	rc = shim_ret(ibv_query_device(ctx, &da));
	if (rc)
		return rc;
	*vendor_id = da.vendor_id;
	*max_cqe = da.max_cqe;
	return 0;
}

static inline int shim_cmd_fd(struct ibv_context *ctx) { return ctx->cmd_fd; }

static inline int shim_transport(struct ibv_context *ctx) { return ctx->device->transport_type; }

static inline const char *shim_dev_name(struct ibv_context *ctx) { return ibv_get_device_name(ctx->device); }

struct shim_async_event {
	int type;
	uintptr_t key; // context of the QP, SRQ or CQ concerned; 0 for others
};

// shim_next_async_event takes one async event off ctx, copies and acks it.
static inline int shim_next_async_event(struct ibv_context *ctx, struct shim_async_event *out) {
	struct ibv_async_event e;
	errno = 0;
	if (ibv_get_async_event(ctx, &e))
		return shim_err();
	out->type = e.event_type;
	out->key = 0;
	switch (e.event_type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		out->key = (uintptr_t)e.element.qp->qp_context;
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		out->key = (uintptr_t)e.element.srq->srq_context;
		break;
	case IBV_EVENT_CQ_ERR:
		out->key = (uintptr_t)e.element.cq->cq_context;
		break;
	default:
		break;
	}
	ibv_ack_async_event(&e);
	return 0;
}

// ---------------------------------------------------------------- memory

static inline int shim_alloc_pd(struct ibv_context *ctx, struct ibv_pd **pd) {
	errno = 0;
	*pd = ibv_alloc_pd(ctx);
	return *pd ? 0 : shim_err();
}

static inline int shim_dealloc_pd(struct ibv_pd *pd) {
	errno = 0;
	return shim_ret(ibv_dealloc_pd(pd));
}

static inline int shim_reg_mr(struct ibv_pd *pd, uintptr_t addr, size_t len, int access, struct ibv_mr **mr) {
	errno = 0;
	*mr = ibv_reg_mr(pd, (void *)addr, len, access);
	return *mr ? 0 : shim_err();
}

static inline int shim_dereg_mr(struct ibv_mr *mr) {
	errno = 0;
	return shim_ret(ibv_dereg_mr(mr));
}

// ---------------------------------------------------------------- memory windows

// Type 1 windows only: they belong to the PD (any QP of it may use a bound
// one, DAT's RMR scope PZ) and ibv_bind_mw rebinds them in place.
static inline int shim_alloc_mw(struct ibv_pd *pd, struct ibv_mw **mw) {
	errno = 0;
	*mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	return *mw ? 0 : shim_err();
}

static inline int shim_dealloc_mw(struct ibv_mw *mw) {
	errno = 0;
	return shim_ret(ibv_dealloc_mw(mw));
}

// shim_bind_mw posts to qp a bind of mw over [addr, addr+len) of mr with
// the remote rights in access; len 0 unbinds. Go passes the region the
// window is bound to even then: ibv_bind_mw allows a NULL mr for a
// zero-length bind, but nothing obliges a provider's bind_mw to check for
// it, and a region is always at hand. On success *rkey is the key the
// window has once the bind completes. ibv_bind_mw writes that key into
// mw->rkey at once; if the post fails the old key is put back, as
// ibv_bind_mw(3) asks, so mw->rkey keeps naming what the device has.
static inline int shim_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, uint64_t wr_id, struct ibv_mr *mr,
                               uint64_t addr, uint64_t len, int access, uint32_t *rkey) {
	struct ibv_mw_bind b;
	uint32_t old = mw->rkey;
	int rc;
	memset(&b, 0, sizeof b);
	b.wr_id = wr_id;
	b.send_flags = IBV_SEND_SIGNALED;
	b.bind_info.mr = mr;
	b.bind_info.addr = addr;
	b.bind_info.length = len;
	b.bind_info.mw_access_flags = (unsigned int)access;
	errno = 0;
	rc = shim_ret(ibv_bind_mw(qp, mw, &b));
	if (rc) {
		mw->rkey = old;
		return rc;
	}
	*rkey = mw->rkey;
	return 0;
}

// ---------------------------------------------------------------- CQ

static inline int shim_create_comp_channel(struct ibv_context *ctx, struct ibv_comp_channel **ch) {
	errno = 0;
	*ch = ibv_create_comp_channel(ctx);
	return *ch ? 0 : shim_err();
}

// shim_create_cq creates a CQ (ch may be NULL). libsiw refuses a CQ whose
// mmap key is its invalid-key value without setting errno: -SHIM_NO_ERRNO.
static inline int shim_create_cq(struct ibv_context *ctx, int cqe, struct ibv_comp_channel *ch, struct ibv_cq **cq) {
	errno = 0;
	*cq = ibv_create_cq(ctx, cqe, NULL, ch, 0);
	return *cq ? 0 : shim_err();
}

static inline int shim_destroy_cq(struct ibv_cq *cq) {
	errno = 0;
	return shim_ret(ibv_destroy_cq(cq));
}

static inline int shim_cq_size(struct ibv_cq *cq) { return cq->cqe; }

static inline int shim_resize_cq(struct ibv_cq *cq, int cqe) {
	errno = 0;
	return shim_ret(ibv_resize_cq(cq, cqe));
}

// shim_probe_resize_cq reports whether the device can resize a CQ: some
// (siw) leave ibv_resize_cq unimplemented.
static inline int shim_probe_resize_cq(struct ibv_context *ctx) {
	struct ibv_cq *cq = ibv_create_cq(ctx, 2, NULL, NULL, 0);
	int ok;
	if (!cq)
		return 0;
	ok = ibv_resize_cq(cq, cq->cqe + 16) == 0;
	ibv_destroy_cq(cq);
	return ok;
}

static inline int shim_arm_cq(struct ibv_cq *cq) {
	errno = 0;
	return shim_ret(ibv_req_notify_cq(cq, 0));
}

// shim_take_cq_events takes every completion event queued on ch (a
// non-blocking channel that serves one CQ) and acks them at once, so
// ibv_destroy_cq never waits for Go. Returns the number taken, or -errno
// if none could be taken (-EAGAIN: none queued).
static inline int shim_take_cq_events(struct ibv_comp_channel *ch) {
	struct ibv_cq *cq;
	void *ctx;
	int n = 0;
	errno = 0;
	while (ibv_get_cq_event(ch, &cq, &ctx) == 0) {
		ibv_ack_cq_events(cq, 1);
		n++;
	}
	return n ? n : shim_err();
}

struct shim_wc {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t byte_len;
	uint32_t qp_num;
	uint32_t imm;      // host order; valid with SHIM_WC_IMM
	uint32_t has_imm;  // the receive was consumed by an RDMA Write with Immediate
};

#define SHIM_POLL_BATCH 32

// shim_poll takes up to n (<= SHIM_POLL_BATCH) completions into out.
// Returns the number taken, or a negative value on failure (ibv_poll_cq
// reports no errno).
static inline int shim_poll(struct ibv_cq *cq, struct shim_wc *out, int n) {
	struct ibv_wc wc[SHIM_POLL_BATCH];
	if (n > SHIM_POLL_BATCH)
		n = SHIM_POLL_BATCH;
	int got = ibv_poll_cq(cq, n, wc);
	for (int i = 0; i < got; i++) {
		out[i].wr_id = wc[i].wr_id;
		out[i].status = wc[i].status;
		out[i].opcode = wc[i].opcode;
		out[i].byte_len = wc[i].byte_len;
		out[i].qp_num = wc[i].qp_num;
		out[i].has_imm = wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM && (wc[i].wc_flags & IBV_WC_WITH_IMM);
		out[i].imm = out[i].has_imm ? ntohl(wc[i].imm_data) : 0;
	}
	return got;
}

// ---------------------------------------------------------------- QP

static inline int shim_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq,
                                 struct ibv_srq *srq, uint32_t send_wr, uint32_t recv_wr, uint32_t send_sge,
                                 uint32_t recv_sge, uint32_t max_inline, uint32_t *got_inline, uintptr_t key) {
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.qp_context = (void *)key;
	a.send_cq = scq;
	a.recv_cq = rcq;
	a.srq = srq;
	a.cap.max_send_wr = send_wr;
	a.cap.max_send_sge = send_sge;
	if (!srq) {
		a.cap.max_recv_wr = recv_wr;
		a.cap.max_recv_sge = recv_sge;
	}
	a.cap.max_inline_data = max_inline;
	a.qp_type = IBV_QPT_RC;
	// Only requests posted with IBV_SEND_SIGNALED complete on success
	// (selective signalling, see doc.go).
	a.sq_sig_all = 0;
	errno = 0;
	if (rdma_create_qp(id, pd, &a))
		return shim_err();
	// rdma_create_qp copies back the capabilities the device granted,
	// which may exceed those asked for (rxe rounds inline data up to its
	// WQE size).
	*got_inline = a.cap.max_inline_data;
	return 0;
}

static inline uint32_t shim_qp_num(struct ibv_qp *qp) { return qp->qp_num; }

static inline struct ibv_qp *shim_id_qp(struct rdma_cm_id *id) { return id->qp; }

// shim_qp_in_error reports whether the QP is in the error state (0 if it
// is not or the device cannot say).
static inline int shim_qp_in_error(struct ibv_qp *qp) {
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr i;
	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &i))
		return 0;
	return a.qp_state == IBV_QPS_ERR;
}

static inline int shim_qp_to_error(struct ibv_qp *qp) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_ERR;
	errno = 0;
	return shim_ret(ibv_modify_qp(qp, &a, IBV_QP_STATE));
}

static inline int shim_post_send(struct ibv_qp *qp, uint64_t wr_id, int opcode, int flags,
                                 struct ibv_sge *sge, int nsge, uint64_t raddr, uint32_t rkey, uint32_t imm) {
	struct ibv_send_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = wr_id;
	wr.sg_list = nsge ? sge : NULL;
	wr.num_sge = nsge;
	wr.opcode = opcode;
	wr.send_flags = flags;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	if (opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
		wr.imm_data = htonl(imm);
	errno = 0;
	return shim_ret(ibv_post_send(qp, &wr, &bad));
}

// One send-side request of shim_post_send_list, its SGEs at sge_off in
// the list's SGE array.
struct shim_wr {
	uint64_t wr_id;
	uint64_t raddr;
	uint32_t rkey;
	uint32_t imm; // host order; for IBV_WR_RDMA_WRITE_WITH_IMM
	int32_t opcode;
	int32_t flags;
	int32_t sge_off;
	int32_t nsge;
};

#define SHIM_LIST_MAX 8

// shim_post_send_list posts n (1..SHIM_LIST_MAX) requests chained in one
// ibv_post_send. *took gets how many the device accepted: all of them, or
// those before the one it refused.
static inline int shim_post_send_list(struct ibv_qp *qp, struct shim_wr *w, int n, struct ibv_sge *sges, int *took) {
	struct ibv_send_wr wr[SHIM_LIST_MAX], *bad = NULL;
	*took = 0;
	if (n < 1 || n > SHIM_LIST_MAX)
		return -EINVAL;
	memset(wr, 0, sizeof wr[0] * n);
	for (int i = 0; i < n; i++) {
		wr[i].wr_id = w[i].wr_id;
		wr[i].sg_list = w[i].nsge ? sges + w[i].sge_off : NULL;
		wr[i].num_sge = w[i].nsge;
		wr[i].opcode = w[i].opcode;
		wr[i].send_flags = w[i].flags;
		wr[i].wr.rdma.remote_addr = w[i].raddr;
		wr[i].wr.rdma.rkey = w[i].rkey;
		if (w[i].opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
			wr[i].imm_data = htonl(w[i].imm);
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
	}
	errno = 0;
	int rc = shim_ret(ibv_post_send(qp, wr, &bad));
	*took = rc == 0 ? n : (bad ? (int)(bad - wr) : 0);
	return rc;
}

static inline int shim_post_recv(struct ibv_qp *qp, uint64_t wr_id, struct ibv_sge *sge, int nsge) {
	struct ibv_recv_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = wr_id;
	wr.sg_list = nsge ? sge : NULL;
	wr.num_sge = nsge;
	errno = 0;
	return shim_ret(ibv_post_recv(qp, &wr, &bad));
}

// ---------------------------------------------------------------- SRQ

static inline int shim_create_srq(struct ibv_pd *pd, uint32_t max_wr, uint32_t max_sge, uintptr_t key, struct ibv_srq **srq) {
	struct ibv_srq_init_attr a;
	memset(&a, 0, sizeof a);
	a.srq_context = (void *)key;
	a.attr.max_wr = max_wr;
	a.attr.max_sge = max_sge;
	errno = 0;
	*srq = ibv_create_srq(pd, &a);
	return *srq ? 0 : shim_err();
}

static inline int shim_destroy_srq(struct ibv_srq *srq) {
	errno = 0;
	return shim_ret(ibv_destroy_srq(srq));
}

static inline int shim_srq_limit(struct ibv_srq *srq, uint32_t limit) {
	struct ibv_srq_attr a;
	memset(&a, 0, sizeof a);
	a.srq_limit = limit;
	errno = 0;
	return shim_ret(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT));
}

static inline int shim_post_srq_recv(struct ibv_srq *srq, uint64_t wr_id, struct ibv_sge *sge, int nsge) {
	struct ibv_recv_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = wr_id;
	wr.sg_list = nsge ? sge : NULL;
	wr.num_sge = nsge;
	errno = 0;
	return shim_ret(ibv_post_srq_recv(srq, &wr, &bad));
}

#endif
