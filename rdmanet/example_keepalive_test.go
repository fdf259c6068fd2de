package rdmanet_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"syscall"
	"time"

	"github.com/rdmanet/rdmanet/rdmanet"
)

// A Dialer takes package net's socket options: here a keepalive that
// gives a vanished server up after about 10 s of silence (5 s idle, then 5
// probes a second apart), and a Control hook that sees the socket before
// it connects (with the iwarp provider; it could set SO_MARK or a TOS).
func ExampleDialer_keepAlive() {
	ln, err := (&rdmanet.ListenConfig{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 5 * time.Second, Interval: time.Second, Count: 5}}).
		Listen(context.Background(), "rdma", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	d := rdmanet.Dialer{
		Timeout:         5 * time.Second,
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 5 * time.Second, Interval: time.Second, Count: 5},
		Control: func(network, address string, c syscall.RawConn) error {
			fmt.Println("socket for", network)
			return nil
		},
	}
	c, err := d.Dial("rdma", ln.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	c.Close()
	// Output: socket for tcp4
}
