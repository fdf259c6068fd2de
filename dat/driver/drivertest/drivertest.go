// Package drivertest is a conformance suite for DAT providers: it holds an
// implementation of package dat/driver to the contract written in that
// package's documentation, directly at the driver level, without package
// dat in between. It plays the role golang.org/x/net/nettest plays for
// net.Conn implementations.
//
// # Using the suite
//
// A provider runs it from one test of its own, giving the suite a way to
// open two IAs, one that listens and accepts (passive) and one that
// connects (active), and saying what it claims to support:
//
//	func TestConformance(t *testing.T) {
//		open := func(ctx context.Context) (driver.IA, error) {
//			return myprov.Driver{}.Open(ctx, []string{"127.0.0.1"})
//		}
//		drivertest.Run(t, drivertest.Config{
//			OpenPassive: open,
//			OpenActive:  open,
//			RequireSRQ:  true,
//		})
//	}
//
// Run starts one subtest per rule, grouped by topic (Connect, Listen,
// Data, CQ, Teardown, Protection, Race, SRQ, Window), so that the test
// output reads as a checklist and `go test -run 'Conformance/Teardown/'`
// selects a part of it. Each subtest opens fresh IAs, creates what it
// needs, closes every object it created and the IAs, and then checks that
// no goroutine started during the subtest is left: a provider whose Close
// leaves a goroutine behind fails the subtest that caused it.
//
// The suite calls a provider the way package dat does: Poll and Wait of
// one CQ from one goroutine at a time, posts to one queue from one
// goroutine at a time, private data within IAAttr.MaxPrivateData, and
// no use of an object after its Close. Anything a provider must do beyond
// that, it checks.
//
// # Timing
//
// Every wait for an event is bounded (10 s by default), and every check
// that something does not happen watches for a quiet period (200 ms by
// default). Config.Slowdown multiplies both, for providers tested on slow
// machines or under emulation.
package drivertest

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// Config tells the suite how to reach a provider and what the provider
// claims to support.
type Config struct {
	// OpenPassive opens the IA whose listeners accept connections. Each
	// subtest opens its own IAs and closes them when it ends. Required.
	OpenPassive func(ctx context.Context) (driver.IA, error)
	// OpenActive opens the IA whose QPs connect to the passive IA's
	// listeners. It may open the same address as OpenPassive. Required.
	OpenActive func(ctx context.Context) (driver.IA, error)
	// ConnectAddr returns the address an active QP connects to in order to
	// reach l, a listener of a passive IA. Nil means l.Addr(), which suits
	// a provider whose listeners report a reachable address.
	ConnectAddr func(l driver.Listener) net.Addr
	// RequireSRQ makes the SRQ subtests fail, instead of skipping, when
	// the passive IA does not implement driver.SRQCreator.
	RequireSRQ bool
	// RequireWindows makes the Window subtests fail, instead of skipping,
	// when the PD does not implement driver.WindowAllocator or the QP
	// driver.WindowBinder.
	RequireWindows bool
	// PaddedPrivateData accepts received private data that is longer
	// than what was sent, zero-padded, as the InfiniBand CM delivers it.
	// Without it private data must arrive byte for byte.
	PaddedPrivateData bool
	// Slowdown multiplies every timeout and quiet period of the suite
	// (values below 1 count as 1).
	Slowdown float64
	// Cycles is the number of connect/disconnect cycles of
	// Race/ConnectCycles (default 20).
	Cycles int
	// Known lists subtests ("Group/Rule") the provider is known not to
	// pass yet, each with the reason; they are skipped with it, so that
	// the rest of the suite guards the provider meanwhile. An entry for a
	// subtest that does not exist fails the run, so the list cannot
	// outlive the suite's names.
	Known map[string]string
}

// Base durations, before Config.Slowdown.
const (
	baseTimeout = 10 * time.Second       // bound on any awaited event
	baseQuiet   = 200 * time.Millisecond // how long "nothing happens" is watched
)

// testCase is one subtest.
type testCase struct {
	name string
	fn   func(e *env)
}

// group is a topic of the checklist.
type group struct {
	name  string
	cases []testCase
}

// suite lists every subtest, in the order Run runs them.
func suite() []group {
	return []group{
		{"IA", []testCase{
			{"AttrStableAndSane", testAttr},
		}},
		{"Connect", []testCase{
			{"PrivateDataBothWays", testPrivateData},
			{"Addresses", testAddresses},
			{"RequestInfoReadDepths", testRequestDepths},
			{"RejectWithPrivateData", testReject},
			{"NoListenerIsNotReject", testNoListener},
			{"DeadlineExceeded", testConnectDeadline},
			{"AtMostOnce", testConnectOnce},
			{"ModifyBeforeConnect", testModify},
		}},
		{"Listen", []testCase{
			{"PortInUse", testPortInUse},
			{"CloseUnblocksAccept", testListenerCloseUnblocks},
			{"CloseAbortsPending", testListenerCloseAborts},
			{"AcceptHonoursContext", testAcceptContext},
			{"SurvivesEstablishedConnection", testListenerCloseKeepsConn},
		}},
		{"Data", []testCase{
			{"SendRecv", testSendRecv},
			{"SendRecvLengths", testSendLengths},
			{"RecvTooSmall", testRecvTooSmall},
			{"RDMAWrite", testWrite},
			{"RDMAWriteImm", testWriteImm},
			{"PostSendList", testPostSendList},
			{"RDMARead", testRead},
			{"MultiSGE", testMultiSGE},
			{"ManyPostsEachOnce", testManyPosts},
			{"UnsignaledThenSignaled", testUnsignaled},
			{"SharedCQTags", testSharedCQ},
		}},
		{"CQ", []testCase{
			{"PollNeverBlocks", testPollNonBlocking},
			{"PollOldestFirstInParts", testPollParts},
			{"WaitReturnsWhenQueued", testWaitQueued},
			{"WaitHonoursDeadline", testWaitDeadline},
			{"InterruptWakesWait", testInterruptWakes},
			{"PendingInterrupt", testPendingInterrupt},
			{"CloseUnblocksWait", testCQCloseUnblocks},
		}},
		{"Teardown", []testCase{
			{"AbruptDisconnectQuiesces", func(e *env) { testLocalEndQuiesces(e, endAbrupt) }},
			{"GracefulDisconnectQuiesces", func(e *env) { testLocalEndQuiesces(e, endGraceful) }},
			{"CloseQuiesces", func(e *env) { testLocalEndQuiesces(e, endClose) }},
			{"PeerGracefulDisconnect", func(e *env) { testPeerEnd(e, endGraceful) }},
			{"PeerAbruptDisconnect", func(e *env) { testPeerEnd(e, endAbrupt) }},
			{"PeerClose", func(e *env) { testPeerEnd(e, endClose) }},
			{"PostsAfterEndDropped", testPostsAfterEnd},
			{"GracefulLetsSendFinish", testGracefulSendFinishes},
			{"DisconnectIdempotent", testDisconnectIdempotent},
		}},
		{"Protection", []testCase{
			{"BadLKeySend", func(e *env) { testBadLocal(e, badLKey) }},
			{"OutOfRegionSend", func(e *env) { testBadLocal(e, outOfRegion) }},
			{"OutOfRegionRecv", testBadRecvSGE},
			{"WriteBadRKey", func(e *env) { testBadRemote(e, driver.OpRDMAWrite, badRKey) }},
			{"WriteNoRemoteAccess", func(e *env) { testBadRemote(e, driver.OpRDMAWrite, noAccess) }},
			{"WriteOutOfBounds", func(e *env) { testBadRemote(e, driver.OpRDMAWrite, outOfBounds) }},
			{"ReadBadRKey", func(e *env) { testBadRemote(e, driver.OpRDMARead, badRKey) }},
		}},
		{"Race", []testCase{
			{"DisconnectWhilePosting", testDisconnectWhilePosting},
			{"BothSidesDisconnect", testBothDisconnect},
			{"CloseDuringConnect", func(e *env) { testEndDuringConnect(e, true) }},
			{"DisconnectDuringConnect", func(e *env) { testEndDuringConnect(e, false) }},
			{"ConnectCyclesLeakNothing", testCycles},
		}},
		{"SRQ", []testCase{
			{"CompletesOnConsumingQP", testSRQConsumer},
			{"LowWatermarkOnce", testSRQWatermark},
			{"WatermarkAtCreation", testSRQWatermarkAtCreate},
		}},
		{"Window", []testCase{
			{"BindNeedsConnection", testWindowUnconnected},
			{"BindWriteUnbind", testWindowBindWrite},
			{"RangeEnforced", testWindowRange},
			{"CloseEndsBinding", testWindowClose},
		}},
	}
}

// Run runs the conformance suite against the provider cfg describes, as
// subtests of t named Group/Rule.
func Run(t *testing.T, cfg Config) {
	if cfg.OpenPassive == nil || cfg.OpenActive == nil {
		t.Fatal("drivertest: Config.OpenPassive and Config.OpenActive are required")
	}
	if cfg.Slowdown < 1 {
		cfg.Slowdown = 1
	}
	if cfg.Cycles <= 0 {
		cfg.Cycles = 20
	}
	names := map[string]bool{}
	for _, g := range suite() {
		for _, c := range g.cases {
			names[g.name+"/"+c.name] = true
		}
	}
	for k := range cfg.Known {
		if !names[k] {
			t.Errorf("drivertest: Config.Known names %q, which is no subtest", k)
		}
	}
	for _, g := range suite() {
		t.Run(g.name, func(t *testing.T) {
			for _, c := range g.cases {
				t.Run(c.name, func(t *testing.T) {
					if why, ok := cfg.Known[g.name+"/"+c.name]; ok {
						t.Skip("known not to conform yet: " + why)
					}
					c.fn(newEnv(t, cfg))
				})
			}
		})
	}
}
