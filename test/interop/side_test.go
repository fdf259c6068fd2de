//go:build verbs && linux && cgo

package interop_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// side is one provider's IA with what every test needs of it: a PZ and
// one EVD per stream, so that each wait sees only the events it expects.
type side struct {
	// name is "iwarp" for the pure-Go provider and "siw" for the verbs
	// provider, which runs on the kernel's siw0 here.
	name string
	// provider is the dat provider name, "iwarp" or "verbs".
	provider string
	addr     netip.Addr
	ia       *dat.IA
	pz       *dat.PZ
	// recv and req take the EPs' receive and request completions, conn
	// their connection events and the side's connection requests.
	recv, req, conn *dat.EVD
	// maxPD is the provider's ProviderAttr.MaxPrivateDataSize.
	maxPD int
}

// openSide opens provider's IA on addr, named "provider:addr[ options]"
// (no registry entry needed), and closes it abruptly at cleanup.
func openSide(t *testing.T, provider string, addr netip.Addr, options string) *side {
	t.Helper()
	name := provider + ":" + addr.String()
	if options != "" {
		name += " " + options
	}
	ia, err := dat.OpenIA(context.Background(), name, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ia.Close(dat.CloseAbrupt)) })
	iaAttr, provAttr, err := ia.Query()
	require.NoError(t, err)
	// Both IAs must really be iWARP: a verbs IA that landed on another
	// device (rxe) would make these tests meaningless.
	require.Equal(t, "iwarp", iaAttr.Transport, "transport of IA %s", ia.Name())
	s := &side{name: provider, provider: provider, addr: addr, ia: ia, maxPD: provAttr.MaxPrivateDataSize}
	if provider == "verbs" {
		s.name = "siw"
	}
	s.pz, err = ia.CreatePZ()
	require.NoError(t, err)
	s.recv, err = ia.CreateEVD(64, dat.EVDDTO)
	require.NoError(t, err)
	s.req, err = ia.CreateEVD(64, dat.EVDDTO)
	require.NoError(t, err)
	s.conn, err = ia.CreateEVD(16, dat.EVDConnection|dat.EVDCR)
	require.NoError(t, err)
	return s
}

// epAttr are the attributes of every EP here: several segments per DTO,
// messages and RDMA up to 1 MiB, and a Read depth of 4 each way. Reads
// land in one local segment, as siw requires (SIW_MAX_SGE_RD = 1).
var epAttr = dat.EPAttr{
	MaxMessageSize: 1 << 20, MaxRDMASize: 1 << 20,
	MaxRecvDTOs: 16, MaxRequestDTOs: 16, MaxRecvIOV: 4, MaxRequestIOV: 4,
	MaxRDMAReadIn: 4, MaxRDMAReadOut: 4, MaxRDMAReadIOV: 1, MaxRDMAWriteIOV: 4,
}

// newEP creates an EP whose streams go to the side's EVDs.
func (s *side) newEP(t *testing.T) *dat.EP {
	t.Helper()
	a := epAttr
	ep, err := s.ia.CreateEP(s.pz, s.recv, s.req, s.conn, &a)
	require.NoError(t, err)
	return ep
}

// direction says which provider connects and which listens.
type direction struct {
	name            string
	active, passive string // provider names
}

// directions are the two ways a connection between the providers can be
// made; every test runs in both.
var directions = []direction{
	{"iwarp_to_siw", "iwarp", "verbs"},
	{"siw_to_iwarp", "verbs", "iwarp"},
}

// bothDirections runs fn as one subtest per direction, with a freshly
// opened active side a and passive side p.
func bothDirections(t *testing.T, fn func(t *testing.T, a, p *side)) {
	bothDirectionsWith(t, "", fn)
}

// bothDirectionsWith is bothDirections with the iwarp IA opened with
// iwarpOptions (the provider's key=value arguments).
func bothDirectionsWith(t *testing.T, iwarpOptions string, fn func(t *testing.T, a, p *side)) {
	addr := siwAddr(t)
	open := func(t *testing.T, provider string) *side {
		if provider == "iwarp" {
			return openSide(t, provider, addr, iwarpOptions)
		}
		return openSide(t, provider, addr, "")
	}
	for _, d := range directions {
		t.Run(d.name, func(t *testing.T) {
			fn(t, open(t, d.active), open(t, d.passive))
		})
	}
}
