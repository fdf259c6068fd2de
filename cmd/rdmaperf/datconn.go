package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"runtime"
	"time"

	"github.com/rdmanet/rdmanet/dat"
)

// datEnd is one side of a DAT test: its IA and the objects of its one
// connection. DTO completions of both queues go to one EVD, connection
// events to another, as perftest has one CQ and one CM channel.
type datEnd struct {
	ctx  context.Context
	poll bool
	ia   *dat.IA
	pz   *dat.PZ
	dto  *dat.EVD
	cev  *dat.EVD
	ep   *dat.EP
	regs []*region
}

// region is one registered buffer.
type region struct {
	buf  []byte
	lmr  *dat.LMR
	addr uint64 // registered address of buf[0]
	lkey uint32
	rkey uint32
}

// iov names n bytes at off for a DTO.
func (r *region) iov(off, n int) []dat.LMRTriplet {
	return []dat.LMRTriplet{{Addr: r.addr + uint64(off), Length: uint32(n), Context: r.lkey}}
}

// ctrlLen is the size of the small Sends that end a bandwidth test.
const ctrlLen = 8

// recvDepth is how many receives each side keeps posted.
const recvDepth = 16

// advert is the server's accept private data for a bandwidth test: where
// the client may RDMA-write.
type advert struct {
	addr uint64
	rkey uint32
	len  uint32
}

const advertLen = 16

func (a advert) append(b []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, a.addr)
	b = binary.BigEndian.AppendUint32(b, a.rkey)
	return binary.BigEndian.AppendUint32(b, a.len)
}

func parseAdvert(b []byte) (advert, error) {
	if len(b) < advertLen {
		return advert{}, fmt.Errorf("the server's accept data has %d bytes, want %d", len(b), advertLen)
	}
	return advert{addr: binary.BigEndian.Uint64(b), rkey: binary.BigEndian.Uint32(b[8:]), len: binary.BigEndian.Uint32(b[12:])}, nil
}

func openEnd(ctx context.Context, cfg *config) (*datEnd, error) {
	e := &datEnd{ctx: ctx, poll: cfg.poll}
	var err error
	if e.ia, err = dat.OpenIA(ctx, cfg.ia, &dat.IAOptions{Poll: cfg.wait}); err != nil {
		return nil, err
	}
	if e.pz, err = e.ia.CreatePZ(); err != nil {
		e.close()
		return nil, err
	}
	if e.cev, err = e.ia.CreateEVD(8, dat.EVDConnection); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// createEP makes the EP for test p with room for sendDepth request DTOs,
// or as many as the IA allows: it returns the depth it got.
func (e *datEnd) createEP(p params, sendDepth int) (int, error) {
	a, _, err := e.ia.Query()
	if err != nil {
		return 0, err
	}
	sendDepth = min(sendDepth, a.MaxDTOPerEP)
	if e.dto, err = e.ia.CreateEVD(sendDepth+recvDepth+8, dat.EVDDTO); err != nil {
		return 0, err
	}
	attr := dat.EPAttr{
		ServiceType: dat.ServiceTypeRC, QoS: dat.QoSBestEffort,
		MaxMessageSize: max(p.size, ctrlLen), MaxRDMASize: p.size,
		RecvCompletionFlags: dat.CompletionEVDThreshold, RequestCompletionFlags: dat.CompletionEVDThreshold,
		MaxRecvDTOs: recvDepth, MaxRequestDTOs: sendDepth,
		MaxRecvIOV: 1, MaxRequestIOV: 1, MaxRDMAWriteIOV: 1,
	}
	e.ep, err = e.ia.CreateEP(e.pz, e.dto, e.dto, e.cev, &attr)
	return sendDepth, err
}

// register registers n bytes.
func (e *datEnd) register(n int, priv dat.MemPriv) (*region, error) {
	buf := make([]byte, n)
	lmr, err := e.ia.CreateLMR(e.pz, buf, priv)
	if err != nil {
		return nil, err
	}
	p, err := lmr.Query()
	if err != nil {
		lmr.Free()
		return nil, err
	}
	r := &region{buf: buf, lmr: lmr, addr: p.Addr, lkey: p.Context, rkey: p.RMRContext}
	e.regs = append(e.regs, r)
	return r, nil
}

// awaitConn waits for the next connection event and wants ESTABLISHED.
func (e *datEnd) awaitEstablished() (dat.Event, error) {
	ev, _, err := e.cev.WaitContext(e.ctx, 1)
	if err != nil {
		return ev, err
	}
	if ev.Number != dat.ConnectionEventEstablished {
		return ev, fmt.Errorf("connection event %v (%v), want ESTABLISHED", ev.Number, ev.Conn.Err)
	}
	return ev, nil
}

// next returns the next DTO completion, waiting on the EVD or, with
// --poll, spinning on dat_evd_dequeue (yielding between tries). A failed
// DTO is an error.
func (e *datEnd) next() (dat.DTOCompletion, error) {
	var ev dat.Event
	var err error
	if e.poll {
		for n := 0; ; n++ {
			if ev, err = e.dto.Dequeue(); dat.Code(err).Type() != dat.QueueEmpty {
				break
			}
			if n&0xfff == 0 && e.ctx.Err() != nil {
				return dat.DTOCompletion{}, e.ctx.Err()
			}
			// Let the provider's goroutines run: they deliver the
			// completions this loop is waiting for.
			runtime.Gosched()
		}
	} else {
		ev, _, err = e.dto.WaitContext(e.ctx, 1)
	}
	if err != nil {
		return dat.DTOCompletion{}, err
	}
	if ev.Number != dat.DTOCompletionEvent {
		return dat.DTOCompletion{}, fmt.Errorf("unexpected event %v on the DTO EVD", ev.Number)
	}
	if ev.DTO.Status != dat.DTOSuccess {
		return ev.DTO, fmt.Errorf("DTO (op %d, cookie %d) failed with status %d", ev.DTO.Op, ev.DTO.Cookie, ev.DTO.Status)
	}
	return ev.DTO, nil
}

// nextRecv returns the next receive completion, skipping send-side ones.
func (e *datEnd) nextRecv() (dat.DTOCompletion, error) {
	for {
		c, err := e.next()
		if err != nil || c.Op == dat.DTOReceive {
			return c, err
		}
	}
}

// awaitDisconnect waits (bounded) for the connection to end.
func (e *datEnd) awaitDisconnect(d time.Duration) error {
	ev, _, err := e.cev.Wait(dat.TimeoutOf(d), 1)
	if err != nil {
		return fmt.Errorf("waiting for DISCONNECTED: %w", err)
	}
	if ev.Number != dat.ConnectionEventDisconnected {
		return fmt.Errorf("connection event %v (%v), want DISCONNECTED", ev.Number, ev.Conn.Err)
	}
	return nil
}

// hangUp disconnects gracefully and waits (bounded) for the EP to be
// disconnected, so the server sees an orderly DISCONNECTED.
func (e *datEnd) hangUp() error {
	if err := e.ep.Disconnect(dat.CloseGraceful); err != nil {
		return fmt.Errorf("disconnect: %w", err)
	}
	return e.awaitDisconnect(10 * time.Second)
}

// close disconnects and frees everything, in dependency order.
func (e *datEnd) close() {
	if e.ep != nil {
		e.ep.Disconnect(dat.CloseAbrupt)
		e.ep.Free()
	}
	for _, r := range e.regs {
		r.lmr.Free()
	}
	for _, evd := range []*dat.EVD{e.dto, e.cev} {
		if evd != nil {
			evd.Free()
		}
	}
	if e.pz != nil {
		e.pz.Free()
	}
	if e.ia != nil {
		if e.ia.Close(dat.CloseGraceful) != nil {
			e.ia.Close(dat.CloseAbrupt)
		}
	}
}

// datServer serves one DAT connection: the client's parameters arrive in
// its connect private data; the EP and buffers are made to measure before
// the accept.
func datServer(cfg *config, ready func(addr string)) (*report, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	e, err := openEnd(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer e.close()
	crEVD, err := e.ia.CreateEVD(4, dat.EVDCR)
	if err != nil {
		return nil, err
	}
	defer crEVD.Free()
	psp, err := e.ia.CreatePSP(dat.ConnQual(cfg.port), crEVD, dat.PSPConsumer, nil)
	if err != nil {
		return nil, err
	}
	defer psp.Free()
	ready(psp.Addr().String())
	ev, _, err := crEVD.WaitContext(ctx, 1)
	if err != nil {
		return nil, fmt.Errorf("waiting for a connection request: %w", err)
	}
	if ev.Number != dat.ConnectionRequestEvent {
		return nil, fmt.Errorf("event %v, want a connection request", ev.Number)
	}
	cr := ev.CR.CR
	crp, err := cr.Query()
	if err != nil {
		return nil, err
	}
	p, err := parseParams(crp.PrivateData)
	if err != nil {
		cr.Reject(nil)
		return nil, err
	}
	if _, err := e.createEP(p, recvDepth); err != nil {
		cr.Reject(nil)
		return nil, err
	}
	rep := &report{cfg: cfg, p: p}
	if p.test == testBW {
		err = serveWriteBW(e, cr, p, rep)
	} else {
		err = serveSendLat(e, cr, p, rep)
	}
	if err != nil {
		return nil, err
	}
	return rep, nil
}

// datClient connects to the server with the test parameters and runs the
// test.
func datClient(cfg *config) (*report, error) {
	addr, err := cfg.dialAddr()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	e, err := openEnd(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer e.close()
	p := paramsOf(cfg)
	rep := &report{cfg: cfg, p: p}
	if p.test == testBW {
		err = writeBW(e, addr, p, cfg.depth, rep)
	} else {
		err = sendLat(e, addr, p, rep)
	}
	if err != nil {
		return nil, err
	}
	return rep, e.hangUp()
}

// connect connects e's EP to the server with p as private data and
// returns the server's accept data.
func (e *datEnd) connect(addr netip.AddrPort, p params) ([]byte, error) {
	timeout := dat.TimeoutInfinite
	if dl, ok := e.ctx.Deadline(); ok {
		timeout = dat.TimeoutOf(time.Until(dl))
	}
	if err := e.ep.Connect(addr.Addr(), dat.ConnQual(addr.Port()), timeout, p.append(nil), dat.QoSBestEffort, dat.ConnectDefault); err != nil {
		return nil, err
	}
	ev, err := e.awaitEstablished()
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return ev.Conn.PrivateData, nil
}
