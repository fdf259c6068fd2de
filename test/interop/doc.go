// Package interop holds the wire interoperability tests between rdmanet's
// two DAT providers: the pure-Go iWARP provider ("iwarp", MPA/DDP/RDMAP on
// a plain TCP socket) and the verbs provider ("verbs") driving the Linux
// kernel's soft-iWARP device siw0 through librdmacm and libibverbs.
//
// Both IAs live in one test process, both on the soft-iWARP interface's
// address, and every test runs in both directions: the iwarp provider
// connecting to a siw listener, and siw connecting to an iwarp listener.
// The tests use only the public dat API. They cover private data on
// connect, accept and reject (at each provider's maximum, and one byte
// over it); Send/Recv, RDMA Write and RDMA Read both ways over each
// connection, also with the iwarp provider's CRC and small-FPDU options;
// and orderly disconnect from either end, also right behind outstanding
// DTOs, which must finish first.
//
// The test files need the verbs provider, so they build only with
// `-tags verbs` on Linux with cgo, and they need a siw device, so they skip
// unless RDMA_SIW_ADDR names its address. The test VM provides both:
//
//	go test -c -tags verbs -o /tmp/interop.test ./test/interop
//	test/vm/run.sh 'cd test/interop && /tmp/interop.test -test.v'
//
// test/vm/suite.sh builds and runs the package in the guest by itself.
// This file only makes the package exist in default builds.
package interop
