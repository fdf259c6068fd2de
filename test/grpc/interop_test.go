package grpc_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/grpclog"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/peer"

	"github.com/rdmanet/rdmanet/rdmanet"
)

func TestMain(m *testing.M) {
	// grpc-go's interop cases report a failure with grpclog's Fatal,
	// which exits the process; testLogger makes it fail the running
	// subtest instead. gRPC wants its logger set before anything else.
	grpclog.SetLoggerV2(testLogger{})
	goleak.VerifyTestMain(m)
}

// interopCases are grpc-go's interop client cases that need no cloud
// credentials, load balancer or ORCA: every kind of RPC, deadlines,
// cancellation, metadata, status codes and unimplemented calls.
var interopCases = []struct {
	name string
	run  func(context.Context, *grpc.ClientConn)
}{
	{"EmptyUnary", func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoEmptyUnaryCall(ctx, testgrpc.NewTestServiceClient(cc))
	}},
	{"LargeUnary", func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoLargeUnaryCall(ctx, testgrpc.NewTestServiceClient(cc))
	}},
	{"ClientStreaming", func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoClientStreaming(ctx, testgrpc.NewTestServiceClient(cc))
	}},
	{"ServerStreaming", func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoServerStreaming(ctx, testgrpc.NewTestServiceClient(cc))
	}},
	{"PingPong", func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoPingPong(ctx, testgrpc.NewTestServiceClient(cc))
	}},
	{"EmptyStream", func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoEmptyStream(ctx, testgrpc.NewTestServiceClient(cc))
	}},
	{"TimeoutOnSleepingServer", func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoTimeoutOnSleepingServer(ctx, testgrpc.NewTestServiceClient(cc))
	}},
	{"CancelAfterBegin", func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoCancelAfterBegin(ctx, testgrpc.NewTestServiceClient(cc))
	}},
	{"CancelAfterFirstResponse", func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoCancelAfterFirstResponse(ctx, testgrpc.NewTestServiceClient(cc))
	}},
	{"CustomMetadata", func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoCustomMetadata(ctx, testgrpc.NewTestServiceClient(cc))
	}},
	{"StatusCodeAndMessage", func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoStatusCodeAndMessage(ctx, testgrpc.NewTestServiceClient(cc))
	}},
	{"SpecialStatusMessage", func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoSpecialStatusMessage(ctx, testgrpc.NewTestServiceClient(cc))
	}},
	{"UnimplementedService", func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoUnimplementedService(ctx, testgrpc.NewUnimplementedServiceClient(cc))
	}},
	{"UnimplementedMethod", func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoUnimplementedMethod(ctx, cc)
	}},
}

// TestInterop runs the interop cases over rdmanet against grpc-go's
// interop test server, once with rdmanet's default buffers and once with
// 16 KiB ones, smaller than the large messages (about 300 KB), so that
// those wrap the receive rings many times over.
func TestInterop(t *testing.T) {
	for _, cfg := range []struct {
		name    string
		bufSize int
	}{{"default", 0}, {"buf16KiB", 16 << 10}} {
		t.Run(cfg.name, func(t *testing.T) {
			cc, stats := startInterop(t, cfg.bufSize)
			for _, c := range interopCases {
				t.Run(c.name, func(t *testing.T) {
					setTest(t)
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					c.run(ctx, cc)
				})
			}
			// Everything must have gone over rdmanet, not TCP: the
			// server saw every RPC come from an rdma peer and the client
			// dialed only rdmanet connections.
			if n := stats.otherRPCs.Load(); n != 0 {
				t.Errorf("server handled %d RPCs from a peer that is not rdma", n)
			}
			if stats.rdmaRPCs.Load() == 0 {
				t.Error("server handled no RPC from an rdma peer")
			}
			if n := stats.dialed.Load(); n == 0 {
				t.Error("the client dialed no rdmanet connection")
			}
		})
	}
}

// interopStats counts what the server and the client saw.
type interopStats struct {
	rdmaRPCs, otherRPCs atomic.Int64 // RPCs by the peer's network, at the server
	dialed              atomic.Int64 // rdmanet connections the client dialed
}

// startInterop serves grpc-go's interop test service on an rdmanet
// listener and returns a client connection to it through rdmanet. Both are
// closed, and the server waited for, when the test ends.
func startInterop(t *testing.T, bufSize int) (*grpc.ClientConn, *interopStats) {
	t.Helper()
	stats := new(interopStats)
	lc := rdmanet.ListenConfig{BufferSize: bufSize}
	ln, err := lc.Listen(context.Background(), "rdma", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The peer of each RPC is the connection's remote address, an
	// *rdmanet.Addr for an rdmanet connection.
	count := func(ctx context.Context) {
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil && p.Addr.Network() == "rdma" {
			stats.rdmaRPCs.Add(1)
		} else {
			stats.otherRPCs.Add(1)
		}
	}
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			count(ctx)
			return h(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			count(ss.Context())
			return h(srv, ss)
		}),
	)
	testgrpc.RegisterTestServiceServer(srv, interop.NewTestServer())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	d := &rdmanet.Dialer{BufferSize: bufSize, Timeout: 10 * time.Second}
	cc, err := grpc.NewClient("passthrough:///"+ln.Addr().String(),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, "rdma", addr)
			if err != nil {
				return nil, err
			}
			if _, ok := c.(*rdmanet.Conn); !ok {
				c.Close()
				return nil, fmt.Errorf("dialed a %T, not an *rdmanet.Conn", c)
			}
			stats.dialed.Add(1)
			return c, nil
		}),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	)
	if err != nil {
		srv.Stop()
		<-served
		t.Fatal(err)
	}
	t.Cleanup(func() {
		setTest(nil)
		cc.Close()
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return cc, stats
}

// testLogger is gRPC's logger while these tests run: Fatal fails the
// current subtest (t.Fatal, so the subtest stops and the next one runs)
// instead of exiting; warnings and errors go to its log; info is dropped.
type testLogger struct{}

var current struct {
	sync.Mutex
	t *testing.T
}

// setTest makes t the test gRPC's log goes to, until t ends.
func setTest(t *testing.T) {
	current.Lock()
	current.t = t
	current.Unlock()
	if t != nil {
		t.Cleanup(func() { setTest(nil) })
	}
}

// logTo logs to the current test if there is one. The lock keeps a
// background gRPC goroutine from logging to a test that has finished,
// which panics.
func logTo(level, msg string) {
	current.Lock()
	defer current.Unlock()
	if current.t != nil {
		current.t.Logf("grpc %s: %s", level, msg)
	}
}

func (testLogger) Info(...any)                 {}
func (testLogger) Infoln(...any)               {}
func (testLogger) Infof(string, ...any)        {}
func (testLogger) V(int) bool                  { return false }
func (testLogger) Warning(a ...any)            { logTo("warning", fmt.Sprint(a...)) }
func (testLogger) Warningln(a ...any)          { logTo("warning", fmt.Sprintln(a...)) }
func (testLogger) Warningf(f string, a ...any) { logTo("warning", fmt.Sprintf(f, a...)) }
func (testLogger) Error(a ...any)              { logTo("error", fmt.Sprint(a...)) }
func (testLogger) Errorln(a ...any)            { logTo("error", fmt.Sprintln(a...)) }
func (testLogger) Errorf(f string, a ...any)   { logTo("error", fmt.Sprintf(f, a...)) }
func (testLogger) Fatal(a ...any)              { fatal(fmt.Sprint(a...)) }
func (testLogger) Fatalln(a ...any)            { fatal(fmt.Sprintln(a...)) }
func (testLogger) Fatalf(f string, a ...any)   { fatal(fmt.Sprintf(f, a...)) }

// fatal fails the current test and stops it; the interop cases call
// Fatal from the test's goroutine, where t.Fatal may be called. With no
// test to fail, gRPC's own os.Exit(1) follows.
func fatal(msg string) {
	current.Lock()
	t := current.t
	current.Unlock()
	if t == nil {
		fmt.Fprintln(os.Stderr, "grpc fatal:", msg)
		return
	}
	t.Helper()
	t.Fatal(msg)
}

// TestFatalFailsSubtest checks the plumbing above: an interop case that
// fails must fail its subtest and let the next one run, not end the test
// binary. It runs this binary again on fatalHelper, whose first subtest
// logs a Fatal, and reads the report.
func TestFatalFailsSubtest(t *testing.T) {
	if os.Getenv("RDMANET_GRPC_FATAL_HELPER") == "1" {
		t.Skip("inside the helper process")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFatalHelper$", "-test.v")
	cmd.Env = append(os.Environ(), "RDMANET_GRPC_FATAL_HELPER=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the helper passed; want it to fail\n%s", out)
	}
	for _, want := range []string{
		"--- FAIL: TestFatalHelper/fails",
		"helper failure 42",
		"--- PASS: TestFatalHelper/runs_after",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("helper output lacks %q:\n%s", want, out)
		}
	}
}

// TestFatalHelper is TestFatalFailsSubtest's child; it does nothing
// otherwise.
func TestFatalHelper(t *testing.T) {
	if os.Getenv("RDMANET_GRPC_FATAL_HELPER") != "1" {
		t.Skip("run by TestFatalFailsSubtest")
	}
	t.Run("fails", func(t *testing.T) {
		setTest(t)
		grpclog.Fatalf("helper failure %d", 42)
		t.Error("Fatal returned")
	})
	t.Run("runs after", func(t *testing.T) {})
}
