// Command datdemo shows the DAT connection model end to end on one machine:
// two IAs of the pure-Go iWARP provider on 127.0.0.1, a server PSP, a
// client EP that connects with private data, the server accepting with
// private data of its own, a graceful disconnect, and every event as it
// arrives.
//
//	go run ./cmd/datdemo
package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/rdmanet/rdmanet/dat"
)

func main() {
	ia := flag.String("ia", "iwarp:127.0.0.1", "IA name to open on both sides (a registry name, or provider:args)")
	addr := flag.String("addr", "127.0.0.1", "address the client connects to")
	flag.Parse()
	if err := run(*ia, netip.MustParseAddr(*addr)); err != nil {
		fmt.Fprintln(os.Stderr, "datdemo:", err)
		os.Exit(1)
	}
}

// end is one side of the demo: an IA with a PZ and an EVD for all streams.
type end struct {
	name string
	ia   *dat.IA
	pz   *dat.PZ
	evd  *dat.EVD
}

func open(name, iaName string) (*end, error) {
	ia, err := dat.OpenIA(context.Background(), iaName, nil)
	if err != nil {
		return nil, err
	}
	pz, err := ia.CreatePZ()
	if err != nil {
		ia.Close(dat.CloseAbrupt)
		return nil, err
	}
	evd, err := ia.CreateEVD(16, dat.EVDDefault)
	if err != nil {
		ia.Close(dat.CloseAbrupt)
		return nil, err
	}
	return &end{name: name, ia: ia, pz: pz, evd: evd}, nil
}

// next waits for the next event and prints it.
func (e *end) next(want dat.EventNumber) (dat.Event, error) {
	ev, _, err := e.evd.Wait(dat.TimeoutOf(10*time.Second), 1)
	if err != nil {
		return ev, fmt.Errorf("%s: waiting for %v: %w", e.name, want, err)
	}
	fmt.Printf("%-6s event %v", e.name, ev.Number)
	switch {
	case ev.Number == dat.ConnectionRequestEvent:
		p, _ := ev.CR.CR.Query()
		fmt.Printf(" from %v, qualifier %d, private data %q", p.RemoteAddr, ev.CR.Qual, p.PrivateData)
	case len(ev.Conn.PrivateData) > 0:
		fmt.Printf(", private data %q", ev.Conn.PrivateData)
	}
	if ev.Conn.Err != nil {
		fmt.Printf(" (%v)", ev.Conn.Err)
	}
	fmt.Println()
	if ev.Number != want {
		return ev, fmt.Errorf("%s: got %v, want %v", e.name, ev.Number, want)
	}
	return ev, nil
}

func run(iaName string, addr netip.Addr) error {
	server, err := open("server", iaName)
	if err != nil {
		return err
	}
	defer server.ia.Close(dat.CloseAbrupt)
	client, err := open("client", iaName)
	if err != nil {
		return err
	}
	defer client.ia.Close(dat.CloseAbrupt)

	psp, err := server.ia.CreatePSPAny(server.evd, dat.PSPConsumer, nil)
	if err != nil {
		return err
	}
	fmt.Printf("server listening on %v (connection qualifier %d)\n", psp.Addr(), psp.Qual())

	cep, err := client.ia.CreateEP(client.pz, client.evd, client.evd, client.evd, nil)
	if err != nil {
		return err
	}
	if err := cep.Connect(addr, psp.Qual(), dat.TimeoutOf(5*time.Second), []byte("hello from the client"), dat.QoSBestEffort, dat.ConnectDefault); err != nil {
		return err
	}
	fmt.Printf("client EP is %v\n", mustState(cep))

	ev, err := server.next(dat.ConnectionRequestEvent)
	if err != nil {
		return err
	}
	sep, err := server.ia.CreateEP(server.pz, server.evd, server.evd, server.evd, nil)
	if err != nil {
		return err
	}
	if err := ev.CR.CR.Accept(sep, []byte("welcome, client")); err != nil {
		return err
	}
	if _, err := server.next(dat.ConnectionEventEstablished); err != nil {
		return err
	}
	if _, err := client.next(dat.ConnectionEventEstablished); err != nil {
		return err
	}
	p, _ := cep.Query()
	fmt.Printf("client EP is %v: %v:%d -> %v:%d\n", p.State, p.LocalAddr, p.LocalPortQual, p.RemoteAddr, p.RemotePortQual)

	if err := cep.Disconnect(dat.CloseGraceful); err != nil {
		return err
	}
	if _, err := client.next(dat.ConnectionEventDisconnected); err != nil {
		return err
	}
	if _, err := server.next(dat.ConnectionEventDisconnected); err != nil {
		return err
	}
	fmt.Printf("client EP is %v, server EP is %v\n", mustState(cep), mustState(sep))
	return nil
}

func mustState(ep *dat.EP) dat.EPState {
	st, err := ep.GetStatus()
	if err != nil {
		return -1
	}
	return st.State
}
