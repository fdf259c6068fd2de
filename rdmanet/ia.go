package rdmanet

import (
	"context"
	"net/netip"
	"sync"

	"github.com/rdmanet/rdmanet/dat"
)

// An IA is opened once per name and process and shared, reference
// counted, by every Conn and Listener on it: opening one is cheap for the
// pure-Go provider but not for a real adapter, and one protection zone per
// IA lets all of them share it. The last user closes it.
//
// The IA also keeps the templates of dup-connect reuse: a dial to an
// address the IA already has a live dialed connection to is made with
// DAT's dup_connect on that connection's EP. They live here rather than
// in the Dialer, so that a Dialer is plain configuration (copyable, as
// net.Dialer), and because dup_connect needs only what a template shares
// with the new connection: the IA, the peer's address and its port.
type sharedIA struct {
	name     string
	provider string // the provider's name (dat ProviderAttr)
	writeImm bool   // the provider has RDMA Write with Immediate (imm.go)
	ia       *dat.IA
	pz       *dat.PZ
	refs     int // guarded by iaTable.mu

	mu        sync.Mutex
	templates map[string]*Conn    // by remote "addr:port"; guarded by mu
	spares    map[string][]*spare // oldest first, by remote "addr:port" (spare.go); guarded by mu
	// idleMem is connection memory kept for the next connections
	// (mem.go), idleBytes its size; guarded by mu.
	idleMem   []*connMemory
	idleBytes int
	// ctrl is where the connections' control receives come from.
	ctrl ctrlPool
}

var iaTable = struct {
	mu sync.Mutex
	m  map[string]*sharedIA
}{m: map[string]*sharedIA{}}

// iaName picks the IA for a configured name and a local address: the
// default iWARP provider is opened bound to the address when there is one
// ("iwarp:127.0.0.1"), so that a listener on 127.0.0.1 listens there only
// and a dialer's LocalAddr is its source address.
func iaName(configured string, local netip.Addr) string {
	name := configured
	if name == "" {
		name = dat.DefaultIAName
	}
	if name == dat.DefaultIAName && local.IsValid() && !local.IsUnspecified() {
		return name + ":" + local.String()
	}
	return name
}

// acquireIA returns the shared IA called name, opening it if needed.
func acquireIA(ctx context.Context, name string) (*sharedIA, error) {
	iaTable.mu.Lock()
	defer iaTable.mu.Unlock()
	if s := iaTable.m[name]; s != nil {
		s.refs++
		return s, nil
	}
	ia, err := dat.OpenIA(ctx, name, nil)
	if err != nil {
		return nil, err
	}
	pz, err := ia.CreatePZ()
	if err != nil {
		ia.Close(dat.CloseAbrupt)
		return nil, err
	}
	s := &sharedIA{name: name, ia: ia, pz: pz, refs: 1, templates: map[string]*Conn{}, spares: map[string][]*spare{}}
	s.ctrl.s = s
	if _, pa, err := ia.Query(); err == nil {
		s.provider = pa.ProviderName
		s.writeImm = pa.WriteImmSupported
	}
	iaTable.m[name] = s
	return s, nil
}

// hold takes another reference on an IA the caller already holds.
func (s *sharedIA) hold() {
	iaTable.mu.Lock()
	s.refs++
	iaTable.mu.Unlock()
}

// release drops a reference; the last one closes the IA.
func (s *sharedIA) release() {
	iaTable.mu.Lock()
	s.refs--
	last := s.refs == 0
	if last {
		delete(iaTable.m, s.name)
	}
	iaTable.mu.Unlock()
	if last {
		s.dropIdleMemory()
		s.ctrl.close()
		s.pz.Free()
		if s.ia.Close(dat.CloseGraceful) != nil {
			// Something of ours is still registered: a bug, but the
			// process must not keep the adapter's sockets and goroutines.
			s.ia.Close(dat.CloseAbrupt)
		}
	}
}

// template returns a live connection to remote to dup, if there is one.
func (s *sharedIA) template(remote string) *Conn {
	s.mu.Lock()
	c := s.templates[remote]
	s.mu.Unlock()
	if c == nil {
		return nil
	}
	c.mu.Lock()
	ok := c.lc == lcOpen && c.err == nil
	c.mu.Unlock()
	if !ok {
		return nil
	}
	return c
}

// remember makes c the template for remote if there is no live one.
func (s *sharedIA) remember(remote string, c *Conn) {
	s.mu.Lock()
	old := s.templates[remote]
	s.mu.Unlock()
	// isDone takes old.mu, which is never held while s.mu is taken; check
	// outside s.mu and replace only what was seen.
	if old != nil && !old.isDone() {
		return
	}
	s.mu.Lock()
	if s.templates[remote] == old {
		s.templates[remote] = c
	}
	s.mu.Unlock()
}

// forget drops a closing connection from the templates.
func (s *sharedIA) forget(remote string, c *Conn) {
	s.mu.Lock()
	if s.templates[remote] == c {
		delete(s.templates, remote)
	}
	s.mu.Unlock()
}
