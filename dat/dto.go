package dat

import "github.com/rdmanet/rdmanet/dat/driver"

// complete routes a provider completion to the EP's recv or request EVD as
// a DAT_DTO_COMPLETION_EVENT. Successful unsignalled requests produce no
// event.
func (ep *EP) complete(c driver.Completion) {
	ia := ep.ia
	ia.mu.Lock()
	evd := ep.reqEVD
	if c.Op == driver.OpRecv {
		evd = ep.recvEVD
		if ep.recvOutstanding > 0 {
			ep.recvOutstanding--
		}
	} else if ep.reqOutstanding > 0 {
		ep.reqOutstanding--
	}
	ia.mu.Unlock()
	if evd == nil || (c.Status == driver.StatusSuccess && !c.Signaled && c.Op != driver.OpRecv) {
		return
	}
	evd.post(Event{Number: DTOCompletionEvent, DTO: DTOCompletion{
		EP: ep, Cookie: c.Cookie, Status: DTOStatus(c.Status), Length: c.Length, Op: DTOOp(c.Op),
	}})
}
