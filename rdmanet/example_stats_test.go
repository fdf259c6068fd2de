package rdmanet_test

import (
	"fmt"
	"io"
	"log"
	"strings"

	"github.com/rdmanet/rdmanet/rdmanet"
)

// Stats tells what a connection did: here a small Write that travelled
// inside a control message and a large one that went as an RDMA Write
// into the peer's ring, and what the two sides agreed on in the
// handshake.
func ExampleConn_Stats() {
	ln, err := rdmanet.Listen("rdma", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	read := make(chan rdmanet.Stats)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		defer c.Close()
		io.Copy(io.Discard, c) // until the client closes
		read <- c.(*rdmanet.Conn).Stats()
	}()

	nc, err := rdmanet.Dial("rdma", ln.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	c := nc.(*rdmanet.Conn) // rdmanet.Dial's net.Conn is a *Conn
	io.WriteString(c, "hello")
	io.WriteString(c, strings.Repeat("x", 4<<10))
	s := c.Stats()
	c.Close()

	fmt.Printf("wrote %d bytes: %d inline, %d RDMA Write\n", s.BytesWritten, s.InlineWrites, s.RDMAWrites)
	fmt.Printf("protocol version %d on %s, rings of %d KiB each way\n",
		s.Params.Version, s.Provider, s.Params.SendRing>>10)
	fmt.Printf("the server read %d bytes\n", (<-read).BytesRead)
	// Output:
	// wrote 4101 bytes: 1 inline, 1 RDMA Write
	// protocol version 1 on iwarp, rings of 16 KiB each way
	// the server read 4101 bytes
}
