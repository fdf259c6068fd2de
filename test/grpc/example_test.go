// Package grpc_test runs gRPC over rdmanet: a grpc.Server serving on an
// rdmanet listener, a client dialing through an rdmanet.Dialer, and
// grpc-go's own interop client cases against its interop test server.
// It is a module of its own so that the main module does not depend on
// gRPC.
package grpc_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/rdmanet/rdmanet/rdmanet"
)

// A gRPC server serves on an rdmanet listener as it would on a TCP one,
// and a client reaches it over RDMA with rdmanet's Dialer as its context
// dialer. The service here is gRPC's standard health service.
func Example() {
	ln, err := rdmanet.Listen("rdma", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln) // returns once srv.Stop closes the listener
	}()

	d := &rdmanet.Dialer{Timeout: 5 * time.Second}
	// "passthrough:///" hands the address to the dialer as it is, with no
	// name resolution. rdmanet carries the bytes; gRPC still chooses the
	// credentials, here none (plaintext HTTP/2).
	cc, err := grpc.NewClient("passthrough:///"+ln.Addr().String(),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return d.DialContext(ctx, "rdma", addr)
		}),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	)
	if err != nil {
		log.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.GetStatus())

	// The client first, then the server (listener and connections).
	cc.Close()
	srv.Stop()
	<-served
	// Output: SERVING
}
