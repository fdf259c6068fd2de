package iwarp

import (
	"fmt"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// recvWR is a posted receive. The segments are copied inline (the driver
// contract lets the caller reuse wr.Local), so posting allocates nothing.
// They are resolved to memory only when a Send starts to land in the
// receive, against the PD of the queue it was posted to.
type recvWR struct {
	id  uint64
	n   int
	sge [maxSGE]driver.SGE
}

func newRecvWR(wr driver.RecvWR) recvWR {
	r := recvWR{id: wr.ID, n: len(wr.Local)}
	copy(r.sge[:], wr.Local)
	return r
}

// srqWR is a receive posted to an SRQ, kept more compactly than recvWR:
// an SRQ may hold thousands of receives, nearly always of one segment
// each (rdmanet's shared control receives), so the first segment is
// inline and any others are in an array of their own.
type srqWR struct {
	id   uint64
	sge  driver.SGE
	n    int32
	more *[maxSGE - 1]driver.SGE
}

func newSRQWR(wr driver.RecvWR) srqWR {
	r := srqWR{id: wr.ID, n: int32(len(wr.Local))}
	if r.n > 0 {
		r.sge = wr.Local[0]
	}
	if r.n > 1 {
		r.more = new([maxSGE - 1]driver.SGE)
		copy(r.more[:], wr.Local[1:])
	}
	return r
}

// recvWR is the receive in the form the data path takes it.
func (w srqWR) recvWR() recvWR {
	r := recvWR{id: w.id, n: int(w.n)}
	r.sge[0] = w.sge
	if w.more != nil {
		copy(r.sge[1:], w.more[:])
	}
	return r
}

// sendWR is a posted Send, RDMA Write or RDMA Read with its local memory
// resolved at post time. It lives in its connection's queues until it
// finishes and is then recycled, so steady-state posting allocates nothing.
type sendWR struct {
	id    uint64
	op    driver.Opcode
	flags driver.SendFlags
	// seg are the local segments (Send/Write source; a Read has one: its
	// sink, cut to the Read size), n how many are used, total their sum.
	seg   [maxSGE][]byte
	n     int
	total uint32
	// Remote is the peer segment of a Write or Read.
	remote driver.RemoteSegment
	// Read only: the sink as the Read Request names it, and its region
	// (re-checked when the Response arrives).
	sinkSTag uint32
	sinkTO   uint64
	sinkMR   *MR
	// Read only, guarded by q.mu: sent is set once the writer finished
	// the batch that carried the Read Request, answered once the
	// receiver placed the whole Response (or found it wrong). The Read
	// completes when both are set (see connection.readDoneLocked).
	sent, answered bool

	status driver.Status
}

// completion returns the WR's Completion as it finished, for the QP whose
// Tag is tag.
func (w *sendWR) completion(tag uint32) driver.Completion {
	c := driver.Completion{WRID: w.id, QPTag: tag, Op: w.op, Status: w.status}
	if w.status == driver.StatusSuccess {
		c.Length = w.total
	}
	return c
}

// resolve fills w from wr, checking the local segments against pd: each
// LKey must name a region of the QP's PD and the segment must lie inside
// it; a Read's sink needs local write and exactly one segment holding the
// Read size. Package dat checks the same before posting, so a failure here
// means a caller outside dat (or a region closed meanwhile).
func (w *sendWR) resolve(pd *PD, wr driver.SendWR, maxSGEs int) error {
	*w = sendWR{id: wr.ID, op: wr.Op, flags: wr.Flags, remote: wr.Remote}
	switch wr.Op {
	case driver.OpSend, driver.OpRDMAWrite:
		if len(wr.Local) > maxSGEs {
			return fmt.Errorf("%d SGEs exceed %d: %w", len(wr.Local), maxSGEs, driver.ErrResources)
		}
	case driver.OpRDMARead:
		if len(wr.Local) > 1 {
			return fmt.Errorf("an RDMA Read takes one local segment, not %d: %w", len(wr.Local), driver.ErrResources)
		}
	default:
		return fmt.Errorf("opcode %d: %w", wr.Op, driver.ErrNotSupported)
	}
	var total uint64
	for _, s := range wr.Local {
		if s.Length == 0 {
			continue
		}
		mr, b, err := localSlice(pd, s, wr.Op == driver.OpRDMARead)
		if err != nil {
			return err
		}
		if wr.Op == driver.OpRDMARead {
			w.sinkMR, w.sinkSTag, w.sinkTO = mr, s.LKey, s.Addr
		}
		w.seg[w.n] = b
		w.n++
		total += uint64(s.Length)
	}
	if total > maxMessageSize {
		return fmt.Errorf("%d bytes exceed %d: %w", total, uint64(maxMessageSize), driver.ErrResources)
	}
	w.total = uint32(total)
	if wr.Op == driver.OpRDMAWrite && total > uint64(wr.Remote.Length) {
		return fmt.Errorf("%d local bytes do not fit the %d-byte remote segment: %w", total, wr.Remote.Length, driver.ErrInvalidAddress)
	}
	if wr.Op == driver.OpRDMARead {
		if uint64(wr.Remote.Length) > total {
			return fmt.Errorf("the %d-byte Read does not fit %d local bytes: %w", wr.Remote.Length, total, driver.ErrInvalidAddress)
		}
		w.total = wr.Remote.Length
		if w.n > 0 {
			w.seg[0] = w.seg[0][:w.total]
		}
	}
	return nil
}

// localSlice resolves one local segment in pd.
func localSlice(pd *PD, s driver.SGE, write bool) (*MR, []byte, error) {
	var mr *MR
	if pd != nil {
		mr = pd.lookup(s.LKey)
	}
	if mr == nil {
		return nil, nil, fmt.Errorf("LKey %#x names no region of the QP's PD: %w", s.LKey, driver.ErrInvalidAddress)
	}
	if write && mr.access&driver.AccessLocalWrite == 0 {
		return nil, nil, fmt.Errorf("region %#x lacks local write: %w", s.LKey, driver.ErrInvalidAddress)
	}
	b, ok := mr.slice(s.Addr, s.Length)
	if !ok {
		return nil, nil, fmt.Errorf("segment [%#x, +%d) leaves region %#x: %w", s.Addr, s.Length, s.LKey, driver.ErrInvalidAddress)
	}
	return mr, b, nil
}
