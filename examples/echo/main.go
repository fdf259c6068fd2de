// Command echo is an rdmanet echo server and client: the same code as a TCP
// echo, with rdmanet's Listen and Dial in place of net's.
//
// In one terminal:
//
//	go run ./examples/echo -listen 127.0.0.1:7000
//
// In another (type lines; each comes back from the server):
//
//	go run ./examples/echo -dial 127.0.0.1:7000
//
// -ia picks the DAT IA (default "iwarp", the pure-Go iWARP provider, which
// needs nothing but TCP). With -n the client sends that many bytes instead
// of stdin and reports the round-trip throughput.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"time"

	"github.com/rdmanet/rdmanet/rdmanet"
)

func main() {
	listen := flag.String("listen", "", "serve echo on this host:port")
	dial := flag.String("dial", "", "connect to an echo server at host:port")
	ia := flag.String("ia", "", `DAT IA name (default "iwarp")`)
	n := flag.Int64("n", 0, "client: send this many bytes instead of stdin, and time it")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	switch {
	case *listen != "" && *dial == "":
		err = runServer(ctx, *ia, *listen, log.New(os.Stderr, "echo: ", log.LstdFlags))
	case *dial != "" && *listen == "":
		err = runClient(ctx, *ia, *dial, *n, os.Stdin, os.Stdout)
	default:
		fmt.Fprintln(os.Stderr, "usage: echo -listen host:port | -dial host:port [-ia name] [-n bytes]")
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "echo:", err)
		os.Exit(1)
	}
}

// runServer echoes every connection until ctx is done.
func runServer(ctx context.Context, ia, addr string, logf *log.Logger) error {
	lc := rdmanet.ListenConfig{IA: ia}
	l, err := lc.Listen(ctx, "rdma", addr)
	if err != nil {
		return err
	}
	logf.Printf("listening on %v", l.Addr())
	defer context.AfterFunc(ctx, func() { l.Close() })()
	return serve(l, logf)
}

// serve is the echo loop, exactly what it would be over TCP.
func serve(l net.Listener, logf *log.Logger) error {
	for {
		c, err := l.Accept()
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			logf.Printf("%v connected", c.RemoteAddr())
			n, err := io.Copy(c, c)
			logf.Printf("%v done: %d bytes echoed (%v)", c.RemoteAddr(), n, errOrEOF(err))
		}()
	}
}

func errOrEOF(err error) any {
	if err == nil {
		return "EOF"
	}
	return err
}

// runClient sends stdin (or n bytes) and copies the echo to out.
func runClient(ctx context.Context, ia, addr string, n int64, in io.Reader, out io.Writer) error {
	d := rdmanet.Dialer{IA: ia, Timeout: 10 * time.Second}
	c, err := d.DialContext(ctx, "rdma", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if n > 0 {
		return timed(c.(*rdmanet.Conn), n, out)
	}
	defer context.AfterFunc(ctx, func() { c.Close() })()
	// Line by line, so an interactive user sees each echo at once.
	sc := bufio.NewScanner(in)
	br := bufio.NewReader(c)
	for sc.Scan() {
		if _, err := fmt.Fprintf(c, "%s\n", sc.Bytes()); err != nil {
			return err
		}
		line, err := br.ReadString('\n')
		if err != nil {
			return err
		}
		io.WriteString(out, line)
	}
	return sc.Err()
}

// timed sends n zero bytes, half-closes, and reads the echo back.
func timed(c *rdmanet.Conn, n int64, out io.Writer) error {
	start := time.Now()
	errc := make(chan error, 1)
	go func() {
		_, err := io.CopyN(c, zeros{}, n)
		if err == nil {
			err = c.CloseWrite()
		}
		errc <- err
	}()
	got, err := io.Copy(io.Discard, c)
	if werr := <-errc; werr != nil {
		return werr
	}
	if err != nil {
		return err
	}
	el := time.Since(start)
	fmt.Fprintf(out, "%d bytes sent and echoed in %v (%.1f MB/s each way)\n", got, el.Round(time.Millisecond), float64(got)/el.Seconds()/1e6)
	if got != n {
		return fmt.Errorf("echoed %d of %d bytes", got, n)
	}
	return nil
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
