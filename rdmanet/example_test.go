package rdmanet_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/rdmanet/rdmanet/rdmanet"
)

// These examples run on loopback with the default IA, the pure-Go iWARP
// provider, which needs nothing but TCP. Each one shuts down everything it
// starts, as a real program should: closing the last connection and
// listener on an IA also closes the IA.

// Dial connects to an rdmanet server the way net.Dial connects to a TCP
// one, and returns a net.Conn.
func ExampleDial() {
	// A server to dial: it greets one client and hangs up.
	ln, err := rdmanet.Listen("rdma", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	served := make(chan struct{})
	go func() {
		defer close(served)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "hello over rdma\n")
	}()

	conn, err := rdmanet.Dial("rdma", ln.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	// conn is a net.Conn: everything that reads a TCP connection reads
	// this one. The server's Close arrives as io.EOF after its data.
	msg, err := io.ReadAll(conn)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(string(msg))
	<-served
	// Output: hello over rdma
}

// Listen returns a net.Listener; an accept loop is written exactly as for
// TCP. This one echoes every connection.
func ExampleListen() {
	// Port 0 picks a free port; ln.Addr() says which.
	ln, err := rdmanet.Listen("rdma", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("network:", ln.Addr().Network())

	var wg sync.WaitGroup // the accept loop and its handlers
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return // net.ErrClosed, once ln.Close is called
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				io.Copy(c, c) // echo until the client closes
			}()
		}
	}()

	c, err := rdmanet.Dial("rdma", ln.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintln(c, "ping")
	echo, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print("echo: ", echo)

	// Shut down: the client, then the listener, then wait for the server.
	c.Close()
	ln.Close()
	wg.Wait()
	// Output:
	// network: rdma
	// echo: ping
}

// A Dialer holds dial options, as net.Dialer does; its zero value works.
// The connection it returns is a *rdmanet.Conn, which half-closes like a
// *net.TCPConn.
func ExampleDialer() {
	// A server that reads a whole request (until the client's
	// CloseWrite) and answers with its size.
	ln, err := rdmanet.Listen("rdma", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	served := make(chan struct{})
	go func() {
		defer close(served)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		n, _ := io.Copy(io.Discard, c)
		fmt.Fprintf(c, "server read %d bytes", n)
	}()

	// Use a Dialer by pointer: it remembers live connections and makes
	// further ones to the same address with DAT's cheaper dup_connect.
	d := &rdmanet.Dialer{Timeout: 5 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "rdma", ln.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	io.WriteString(conn, "hello")
	// Tell the server the request is complete; reading goes on.
	if err := conn.(*rdmanet.Conn).CloseWrite(); err != nil {
		log.Fatal(err)
	}
	reply, err := io.ReadAll(conn)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(reply))
	<-served
	// Output: server read 5 bytes
}

// A ListenConfig holds listen options, as net.ListenConfig does: here a
// smaller buffer per connection than the default (each connection
// registers a receive ring and a staging buffer of this size) and a
// shorter accept backlog.
func ExampleListenConfig() {
	lc := rdmanet.ListenConfig{BufferSize: 64 << 10, Backlog: 16}
	ln, err := lc.Listen(context.Background(), "rdma", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	// The address is an *rdmanet.Addr: an IP and a port.
	addr := ln.Addr().(*rdmanet.Addr)
	fmt.Println("listening on", addr.IP, "with a port picked:", addr.Port != 0)

	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	c, err := rdmanet.Dial("rdma", addr.String())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	s, ok := <-accepted
	if !ok {
		log.Fatal("accept failed")
	}
	defer s.Close()
	// Each side sees the other's address.
	fmt.Println("server's peer is the client:", s.RemoteAddr().String() == c.LocalAddr().String())
	// Output:
	// listening on 127.0.0.1 with a port picked: true
	// server's peer is the client: true
}

// An http.Server serves on an rdmanet listener unchanged, and an
// http.Client talks to it over RDMA once its Transport dials through
// rdmanet. (Requests still use "http://" URLs: the transport underneath
// is not part of the URL.)
func Example_httpServer() {
	ln, err := rdmanet.Listen("rdma", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello, %s\n", r.URL.Path[1:])
	})}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln) // returns http.ErrServerClosed after srv.Close
	}()

	d := &rdmanet.Dialer{Timeout: 5 * time.Second}
	tr := &http.Transport{
		// net/http asks for "tcp"; dial rdma to the same address instead.
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return d.DialContext(ctx, "rdma", addr)
		},
	}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	resp, err := client.Get("http://" + ln.Addr().String() + "/gopher")
	if err != nil {
		log.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(resp.Status, ": ", string(body))

	// Close the client's kept-alive connections, then the server (its
	// listener and connections), and wait for Serve to return.
	tr.CloseIdleConnections()
	srv.Close()
	<-served
	// Output: 200 OK: hello, gopher
}
