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
type sharedIA struct {
	name string
	ia   *dat.IA
	pz   *dat.PZ
	refs int // guarded by iaTable.mu
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
	s := &sharedIA{name: name, ia: ia, pz: pz, refs: 1}
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
		s.pz.Free()
		if s.ia.Close(dat.CloseGraceful) != nil {
			// Something of ours is still registered: a bug, but the
			// process must not keep the adapter's sockets and goroutines.
			s.ia.Close(dat.CloseAbrupt)
		}
	}
}
