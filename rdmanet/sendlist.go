package rdmanet

import "github.com/rdmanet/rdmanet/dat"

// sendList gathers the send-side requests of one chunk (its one or two
// RDMA Writes and the control Send that may follow them) so that they
// reach the provider in one dat.EP.PostSendList call: on verbs one
// ibv_post_send, one doorbell, instead of one per request. It belongs to
// whoever holds Conn.postMu.
type sendList struct {
	reqs [3]dat.SendRequest
	n    int
	// open: requests are being gathered; a control Send joins the list
	// instead of being posted at once.
	open bool
}

func (l *sendList) add(r dat.SendRequest) {
	l.reqs[l.n] = r
	l.n++
}

// submitSends posts the gathered requests. A provider that refuses one
// breaks the connection, as a refused single post does. Callers hold
// postMu.
func (c *Conn) submitSends() {
	l := &c.sends
	if l.n == 0 {
		return
	}
	_, err := c.ep.PostSendList(l.reqs[:l.n])
	clear(l.reqs[:l.n])
	l.n = 0
	if err != nil {
		c.fail(err)
	}
}
