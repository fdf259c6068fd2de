package dat

import "github.com/rdmanet/rdmanet/dat/driver"

// epView is what a post needs to know about its EP, published as one
// immutable value so that posting never takes the IA-wide lock: ia.mu
// guards the EP's fields, and every change a post could see (state,
// attributes, objects, QP, free) publishes a new view under it. A post
// works from the view it loaded; if the EP changes under it, the work
// queue sorts it out (a post that reaches the provider after the
// connection ended is dropped by the provider and flushed by dat).
type epView struct {
	state      EPState
	freed      bool
	pz         *PZ
	qp         driver.QP
	srq        bool
	recv, req  bool // the EP has a recv, a request EVD
	attr       EPAttr
	maxReadSGE int
}

// setStateLocked moves the EP to s. Callers hold ia.mu.
func (ep *EP) setStateLocked(s EPState) {
	ep.state = s
	ep.publishLocked()
}

// publishLocked publishes the EP's current view for posts. Callers hold
// ia.mu, or own the EP before anyone else can see it.
func (ep *EP) publishLocked() {
	ep.view.Store(&epView{
		state: ep.state, freed: ep.freed, pz: ep.pz, qp: ep.qp, srq: ep.srq != nil,
		recv: ep.recvEVD != nil, req: ep.reqEVD != nil, attr: ep.attr, maxReadSGE: ep.ia.attr.MaxReadSGE,
	})
}
