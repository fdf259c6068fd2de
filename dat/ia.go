package dat

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// IA is an open Interface Adapter (DAT_IA_HANDLE): the root of every other
// DAT object. It is safe for concurrent use.
type IA struct {
	name  string
	entry RegistryEntry
	prov  driver.IA
	attr  driver.IAAttr
	async *EVD

	// mu guards the object graph of this IA: every object's freed flag,
	// reference counts, EP states and EVD stream attachments. EVD queues
	// have locks of their own. Provider calls are made without mu held.
	mu     sync.Mutex
	closed bool
	pzs    map[*PZ]struct{}
	evds   map[*EVD]struct{}
	eps    map[*EP]struct{}
	psps   map[*PSP]struct{}
	rsps   map[*RSP]struct{}
	srqs   map[*SRQ]struct{}
	lmrs   map[*LMR]struct{}
	rmrs   map[*RMR]struct{}
	// lmrByContext finds an LMR from the lmr_context in a DTO segment.
	// Writers hold mu and lmrMu; readers either (posts take only lmrMu).
	lmrByContext map[uint32]*LMR
	lmrMu        sync.RWMutex
	// crs holds the connection requests reported but not yet accepted or
	// rejected, so that Close can refuse them.
	crs map[*CR]struct{}

	// bg counts goroutines (connection attempts, service points) that
	// Close must wait for.
	bg sync.WaitGroup

	// poll is how waiters wait for completions.
	poll PollPolicy
	// freshSpin is the adaptive spin's back-off for EVDs that have not
	// spun yet (see EVD.wait).
	freshSpin sharedBackoff

	// qps maps the Tag of every live provider QP to its EP, for the
	// completion path; tagMu guards it (and nextTag) apart from mu, so
	// that polling never takes the IA-wide lock.
	tagMu sync.RWMutex
	qps   map[uint32]*EP
	// srqByID finds a live SRQ from the id in its receives' WRIDs, also
	// guarded by tagMu; nextSRQ numbers them.
	srqByID map[uint32]*SRQ
	nextSRQ uint32
	nextTag uint32
}

// IAOptions tune OpenIA. The zero value is valid.
type IAOptions struct {
	// AsyncEVDQLen is the queue length of the IA's asynchronous EVD
	// (default 16).
	AsyncEVDQLen int
	// Poll says how the IA's waiters wait for completions (default:
	// PollAdaptive with the provider's spin).
	Poll PollPolicy
	// Logger receives the provider's diagnostics at Debug level, for a
	// provider that takes one (driver.ConfigOpener; the verbs provider
	// does). Nil means slog.Default() at the time of logging.
	Logger *slog.Logger
}

// OpenIA opens the IA called name (dat_ia_open). The name is looked up in
// the registry (see RegistryEntry); the empty name opens the registry's
// default entry or DefaultIAName; "provider:args" (for example
// "iwarp:127.0.0.1") opens a provider with inline arguments. The IA creates its own async EVD, which
// AsyncEVD returns.
func OpenIA(ctx context.Context, name string, opts *IAOptions) (*IA, error) {
	const op = "dat_ia_open"
	if opts == nil {
		opts = &IAOptions{}
	}
	qlen := opts.AsyncEVDQLen
	if qlen == 0 {
		qlen = 16
	}
	if qlen < 0 {
		return nil, newError(op, InvalidParameter, Arg(2), "async EVD queue length %d is negative", qlen)
	}
	entry, err := resolveIA(name)
	if err != nil {
		return nil, &Error{Code: ClassError | ProviderNotFound | Return(NameNotRegistered), Op: op, Err: err}
	}
	d, ok := driver.Lookup(entry.Provider)
	if !ok {
		return nil, &Error{Code: ClassError | ProviderNotFound | Return(NameNotRegistered), Op: op, Err: errors.New(missingProvider(entry))}
	}
	var p driver.IA
	if co, ok := d.(driver.ConfigOpener); ok {
		p, err = co.OpenWith(ctx, driver.OpenConfig{Args: entry.Args, Logger: opts.Logger})
	} else {
		p, err = d.Open(ctx, entry.Args)
	}
	if err != nil {
		return nil, providerError(op, err)
	}
	ia := &IA{
		name: entry.IAName, entry: entry, prov: p, attr: p.Attr(),
		pzs: map[*PZ]struct{}{}, evds: map[*EVD]struct{}{}, eps: map[*EP]struct{}{},
		psps: map[*PSP]struct{}{}, rsps: map[*RSP]struct{}{}, srqs: map[*SRQ]struct{}{},
		lmrs: map[*LMR]struct{}{}, lmrByContext: map[uint32]*LMR{}, crs: map[*CR]struct{}{}, rmrs: map[*RMR]struct{}{},
		poll: opts.Poll, qps: map[uint32]*EP{},
	}
	ia.async = newEVD(ia, qlen, EVDAsync)
	ia.async.isAsync = true
	ia.evds[ia.async] = struct{}{}
	return ia, nil
}

// Name is the name the IA was opened with.
func (ia *IA) Name() string { return ia.name }

// AsyncEVD returns the IA's asynchronous event dispatcher.
func (ia *IA) AsyncEVD() *EVD { return ia.async }

// live returns an INVALID_HANDLE error if ia is nil or closed. Callers
// hold ia.mu or accept a racy answer.
func (ia *IA) live(op string) error {
	if ia == nil || ia.closed {
		return newError(op, InvalidHandle, HandleIA, "IA is nil or closed")
	}
	return nil
}

// Query reports the IA's attributes and its provider's (dat_ia_query).
func (ia *IA) Query() (IAAttr, ProviderAttr, error) {
	const op = "dat_ia_query"
	if ia == nil {
		return IAAttr{}, ProviderAttr{}, newError(op, InvalidHandle, HandleIA, "IA is nil")
	}
	ia.mu.Lock()
	defer ia.mu.Unlock()
	if err := ia.live(op); err != nil {
		return IAAttr{}, ProviderAttr{}, err
	}
	return ia.iaAttr(), ia.providerAttr(), nil
}

func (ia *IA) iaAttr() IAAttr {
	a := ia.attr
	return IAAttr{
		AdapterName: a.Name, Transport: a.Transport.String(), MaxEPs: a.MaxQPs,
		MaxDTOPerEP: a.MaxWRPerQP, MaxRDMAReadIn: a.MaxIRD, MaxRDMAReadOut: a.MaxORD,
		MaxIOVSegments: a.MaxSGE, MaxRDMAReadIOV: a.MaxReadSGE, MaxMessageSize: a.MaxMessageSize,
		MaxRDMASize: a.MaxRDMASize, MaxLMRs: a.MaxMR, MaxLMRSize: a.MaxMRSize,
		MaxSRQDTOs: a.MaxSRQWR, MaxPrivateData: a.MaxPrivateData, LocalAddr: ia.localAddr(),
	}
}

func (ia *IA) providerAttr() ProviderAttr {
	return ProviderAttr{
		ProviderName:               ia.entry.Provider,
		QoSSupported:               []QoS{QoSBestEffort},
		CompletionFlagsSupported:   CompletionSuppress | CompletionSolicitedWait | CompletionUnsignalled | CompletionBarrierFence | CompletionEVDThreshold,
		MaxPrivateDataSize:         ia.attr.MaxPrivateData,
		SupportsMultipath:          false,
		SRQSupported:               ia.attr.MaxSRQWR > 0,
		SRQEPPZDifferenceSupported: ia.attr.SRQPDDifference,
		SRQEPLimit:                 ia.attr.SRQQPLimit,
		WriteImmSupported:          ia.attr.WriteImm,
		PSPCreatesEP:               true,
	}
}

// localAddr is the IA's address as a netip.Addr.
func (ia *IA) localAddr() netip.Addr {
	return addrOf(ia.attr.LocalAddr)
}

// tagQP assigns a fresh Tag for a QP of ep. Tags are never reused within
// an IA, so a completion of a destroyed QP can never reach a newer one.
func (ia *IA) tagQP(ep *EP) uint32 {
	ia.tagMu.Lock()
	defer ia.tagMu.Unlock()
	ia.nextTag++
	ia.qps[ia.nextTag] = ep
	return ia.nextTag
}

// addSRQ gives s its id, for the WRIDs of its receives.
func (ia *IA) addSRQ(s *SRQ) {
	ia.tagMu.Lock()
	defer ia.tagMu.Unlock()
	if ia.srqByID == nil {
		ia.srqByID = map[uint32]*SRQ{}
	}
	for {
		ia.nextSRQ = (ia.nextSRQ + 1) & srqIDMask
		if _, used := ia.srqByID[ia.nextSRQ]; !used {
			break
		}
	}
	s.id = ia.nextSRQ
	ia.srqByID[s.id] = s
}

// dropSRQ forgets a freed SRQ's id.
func (ia *IA) dropSRQ(s *SRQ) {
	ia.tagMu.Lock()
	delete(ia.srqByID, s.id)
	ia.tagMu.Unlock()
}

// srqOf finds the live SRQ an SRQ receive's WRID was posted to.
func (ia *IA) srqOf(wrid uint64) *SRQ {
	ia.tagMu.RLock()
	s := ia.srqByID[uint32(wrid>>srqIDShift&srqIDMask)]
	ia.tagMu.RUnlock()
	return s
}

// untagQP forgets a destroyed QP's Tag.
func (ia *IA) untagQP(tag uint32) {
	ia.tagMu.Lock()
	delete(ia.qps, tag)
	ia.tagMu.Unlock()
}

// epByTag finds the EP of a live QP.
func (ia *IA) epByTag(tag uint32) *EP {
	ia.tagMu.RLock()
	ep := ia.qps[tag]
	ia.tagMu.RUnlock()
	return ep
}

// addrOf extracts the IP of a net.Addr (zero Addr if it has none).
func addrOf(a net.Addr) netip.Addr {
	switch a := a.(type) {
	case *net.TCPAddr:
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap()
	case *net.IPAddr:
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap()
	case *net.UDPAddr:
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap()
	}
	return netip.Addr{}
}

// portOf extracts the port of a net.Addr (0 if it has none).
func portOf(a net.Addr) int {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.Port
	case *net.UDPAddr:
		return a.Port
	}
	return 0
}

// Close closes the IA (dat_ia_close). CloseGraceful fails with
// DAT_INVALID_STATE/IA_IN_USE while any object other than the async EVD
// exists; CloseAbrupt frees every object of the IA first, tearing down
// connections abruptly.
func (ia *IA) Close(flags CloseFlags) error {
	const op = "dat_ia_close"
	if ia == nil {
		return newError(op, InvalidHandle, HandleIA, "IA is nil")
	}
	ia.mu.Lock()
	if err := ia.live(op); err != nil {
		ia.mu.Unlock()
		return err
	}
	switch flags {
	case CloseGraceful:
		if n := len(ia.pzs) + len(ia.evds) - 1 + len(ia.eps) + len(ia.psps) + len(ia.rsps) + len(ia.srqs) + len(ia.lmrs) + len(ia.rmrs); n > 0 {
			ia.mu.Unlock()
			return newError(op, InvalidState, StateIAInUse, "%d objects still exist", n)
		}
	case CloseAbrupt:
	default:
		ia.mu.Unlock()
		return newError(op, InvalidParameter, Arg(2), "close flags %#x", flags)
	}
	ia.closed = true
	eps, psps, rsps := keys(ia.eps), keys(ia.psps), keys(ia.rsps)
	srqs, lmrs, pzs, evds := keys(ia.srqs), keys(ia.lmrs), keys(ia.pzs), keys(ia.evds)
	crs := keys(ia.crs)
	var windows []driver.Window
	for r := range ia.rmrs {
		windows = append(windows, r.releaseLocked())
	}
	for _, ep := range eps {
		ep.destroyLocked()
	}
	// Every handle of the IA is invalid from now on.
	for _, s := range psps {
		s.freed = true
	}
	for _, s := range rsps {
		s.freed = true
	}
	for _, s := range srqs {
		s.freed = true
		s.dead.Store(true)
	}
	for _, m := range lmrs {
		m.freed = true
	}
	for _, p := range pzs {
		p.freed = true
	}
	for _, cr := range crs {
		cr.freed = true
	}
	ia.mu.Unlock()

	// Tear down outside the lock: providers may block.
	for _, s := range psps {
		s.shutdown()
	}
	for _, s := range rsps {
		s.shutdown()
	}
	for _, cr := range crs {
		cr.req.Abort() // the initiator sees a non-peer reject
	}
	for _, ep := range eps {
		ep.releaseProvider()
	}
	ia.bg.Wait()
	for _, w := range windows {
		w.Close()
	}
	for _, s := range srqs {
		ia.dropSRQ(s)
		s.prov.Close()
	}
	for _, m := range lmrs {
		m.prov.Close()
	}
	for _, p := range pzs {
		p.prov.Close()
	}
	ia.mu.Lock()
	for _, e := range evds {
		e.kill()
	}
	for _, e := range evds {
		if e.cq != nil {
			e.cq.Close()
		}
	}
	ia.lmrMu.Lock()
	ia.lmrByContext = nil
	ia.lmrMu.Unlock()
	ia.pzs, ia.evds, ia.eps, ia.psps, ia.rsps, ia.srqs, ia.lmrs, ia.rmrs = nil, nil, nil, nil, nil, nil, nil, nil
	ia.mu.Unlock()
	if err := ia.prov.Close(); err != nil {
		return providerError(op, err)
	}
	return nil
}

// keys returns the keys of a set, so it can be walked after the lock is
// released.
func keys[K comparable](m map[K]struct{}) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
