package main

import (
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// A run that stops before its -C iterations: with --latency or
// --bandwidth the client fails, with one line on stderr; without them it
// behaves as rdma-core's rping, which exits 0 when the server goes away.

// extrasModes are the client options of the incomplete-run tests: each
// extra alone, and neither (rping's own behaviour).
var extrasModes = []struct {
	name  string
	args  []string
	extra bool
}{
	{"latency", []string{"--latency"}, true},
	{"bandwidth", []string{"--bandwidth"}, true},
	{"plain", nil, false},
}

// incompleteRE matches the incomplete-run line and captures the count of
// completed iterations.
func incompleteRE(count int, why string) *regexp.Regexp {
	return regexp.MustCompile(`(?m)^rping: incomplete run: ([0-9]+) of ` + strconv.Itoa(count) + ` iterations completed: ` + why + `\n`)
}

// summaryCount returns the iteration count of the summary line on stdout.
func summaryCount(t *testing.T, stdout string) int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^rping (?:latency|bandwidth): ([0-9]+) iterations`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no summary on stdout: %q", stdout)
	}
	return atoiT(m[1])
}

// waitProgress waits until the -v server has printed (flushed) ping lines:
// the client is well into its iterations.
func waitProgress(t *testing.T, server, client *proc) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for server.stdout.Len() == 0 {
		select {
		case <-client.done:
			skipWithoutDataPath(t, client)
			t.Fatalf("client exited early: %v\nstderr:\n%s", client.err, client.stderr.String())
		case <-server.done:
			t.Fatalf("server exited early: %v\nstderr:\n%s", server.err, server.stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no ping progress within 30s")
		}
	}
}

func TestIncompleteRunServerFails(t *testing.T) {
	// The client advertises 64 bytes, the server's buffer holds 32: the
	// server's RDMA Read fails locally, it gives up and disconnects before
	// the first iteration completes. Deterministic, no kill involved.
	for _, m := range extrasModes {
		t.Run(m.name, func(t *testing.T) {
			port := strconv.Itoa(freePort(t))
			server := start(t, "-s", "-a", "127.0.0.1", "-p", port, "-S", "32")
			waitListening(t, server, atoiT(port))
			client := start(t, append([]string{"-c", "-a", "127.0.0.1", "-p", port, "-S", "64", "-C", "5"}, m.args...)...)
			crc := client.wait(t, 60*time.Second)
			src := server.wait(t, 30*time.Second)
			// The server's side is rping's: the failed Read ends it with -1.
			if src != 255 || !strings.HasPrefix(server.stderr.String(), "cq completion failed status 4\n") {
				t.Errorf("server: exit %d, stderr %q", src, server.stderr.String())
			}
			const plain = "client DISCONNECT EVENT...\nwait for RDMA_WRITE_ADV state 10\n"
			if !m.extra {
				if crc != 0 || client.stderr.String() != plain || client.stdout.Len() != 0 {
					t.Errorf("plain client: exit %d (want 0), stdout %q, stderr %q (want %q)",
						crc, client.stdout.String(), client.stderr.String(), plain)
				}
				return
			}
			if want := plain + "rping: incomplete run: 0 of 5 iterations completed: the server closed the connection\n"; crc != 255 || client.stderr.String() != want {
				t.Errorf("client: exit %d (want 255), stderr %q\nwant %q", crc, client.stderr.String(), want)
			}
			if n := summaryCount(t, client.stdout.String()); n != 0 {
				t.Errorf("summary counts %d iterations, want 0:\n%s", n, client.stdout.String())
			}
		})
	}
}

func TestIncompleteRunServerKilled(t *testing.T) {
	// The server is killed in the middle of a long run.
	const count = 100000000
	for _, m := range extrasModes {
		t.Run(m.name, func(t *testing.T) {
			port := strconv.Itoa(freePort(t))
			server := start(t, "-s", "-a", "127.0.0.1", "-p", port, "-v")
			waitListening(t, server, atoiT(port))
			client := start(t, append([]string{"-c", "-a", "127.0.0.1", "-p", port, "-C", strconv.Itoa(count)}, m.args...)...)
			waitProgress(t, server, client)
			server.cmd.Process.Kill()
			server.wait(t, 10*time.Second)
			crc := client.wait(t, 30*time.Second)
			stderr := client.stderr.String()
			if !m.extra {
				// rping's own outcome: the loop notices the disconnect
				// (or, racing it, fails a post) and returns 0 because the
				// state is DISCONNECTED.
				if crc != 0 && !strings.Contains(stderr, "post send error") {
					t.Errorf("plain client: exit %d, want 0\nstderr %q", crc, stderr)
				}
				if strings.Contains(stderr, "incomplete run") || client.stdout.Len() != 0 {
					t.Errorf("plain client printed extras: stdout %q stderr %q", client.stdout.String(), stderr)
				}
				return
			}
			if crc == 0 {
				t.Fatalf("client exit 0 after completing fewer than %d iterations\nstdout %q\nstderr %q", count, client.stdout.String(), stderr)
			}
			why := `(the connection to the server broke \(.+\)|the server closed the connection|posting a Send failed: .+)`
			line := incompleteRE(count, why).FindStringSubmatch(stderr)
			if line == nil {
				t.Fatalf("no incomplete-run line on stderr:\n%s", stderr)
			}
			if strings.Count(stderr, "rping: incomplete run") != 1 || !strings.HasSuffix(stderr, line[0]) {
				t.Errorf("the incomplete-run line is not the single last line:\n%s", stderr)
			}
			n := atoiT(line[1])
			if n == 0 || n != summaryCount(t, client.stdout.String()) {
				t.Errorf("line says %d iterations, summary %q", n, client.stdout.String())
			}
			if crc != 255 && !strings.Contains(stderr, "post send error") {
				t.Errorf("client exit %d, want 255", crc)
			}
		})
	}
}

func TestIncompleteRunInterrupted(t *testing.T) {
	// SIGINT before -C is reached: the summary, the line, exit 128+2.
	port := strconv.Itoa(freePort(t))
	server := start(t, "-s", "-a", "127.0.0.1", "-p", port, "-v")
	waitListening(t, server, atoiT(port))
	client := start(t, "-c", "-a", "127.0.0.1", "-p", port, "-C", "100000000", "--latency")
	waitProgress(t, server, client)
	client.cmd.Process.Signal(syscall.SIGINT)
	if crc := client.wait(t, 30*time.Second); crc != 130 {
		t.Errorf("client exit %d, want 130", crc)
	}
	server.wait(t, 30*time.Second)
	line := incompleteRE(100000000, `stopped by signal 2 \(interrupt\)`).FindStringSubmatch(client.stderr.String())
	if line == nil || client.stderr.String() != line[0] {
		t.Fatalf("client stderr %q", client.stderr.String())
	}
	if n := atoiT(line[1]); n != summaryCount(t, client.stdout.String()) {
		t.Errorf("line says %d iterations, summary %q", n, client.stdout.String())
	}
}

func TestIncompleteRunNoServer(t *testing.T) {
	// A refused connection completes none of the iterations.
	port := strconv.Itoa(freePort(t))
	for _, extra := range []string{"--latency", "--bandwidth"} {
		client := start(t, "-c", "-a", "127.0.0.1", "-p", port, "-C", "3", extra)
		if rc := client.wait(t, 30*time.Second); rc != 255 {
			t.Errorf("%s: exit %d, want 255", extra, rc)
		}
		want := "rdma_connect: Connection refused\nconnect error -1\nrping: incomplete run: 0 of 3 iterations completed: "
		if got := client.stderr.String(); !strings.HasPrefix(got, want) || strings.Count(got, "\n") != 3 {
			t.Errorf("%s: stderr %q, want %q and a reason", extra, got, want)
		}
	}
}

func TestInProcessIncompleteRun(t *testing.T) {
	// The in-process run of TestIncompleteRunServerFails: every goroutine
	// of both sides ends.
	defer goleak.VerifyNone(t)
	port := strconv.Itoa(freePort(t))
	type result struct {
		code     int
		out, err string
	}
	srv := make(chan result, 1)
	go func() {
		c, o, e := runInProcess("-s", "-a", "127.0.0.1", "-p", port, "-S", "32")
		srv <- result{c, o, e}
	}()
	var cli result
	for i := 0; ; i++ {
		cli.code, cli.out, cli.err = runInProcess("-c", "-a", "127.0.0.1", "-p", port, "-S", "64", "-C", "4", "--latency", "--bandwidth")
		if !strings.HasPrefix(cli.err, "rdma_connect: Connection refused") || i == 100 {
			break
		}
		time.Sleep(20 * time.Millisecond) // the server is not listening yet
	}
	select {
	case s := <-srv:
		if s.code&0xff != 255 {
			t.Errorf("server status %d, want 255 (-1)", s.code)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("server did not finish; client: %+v", cli)
	}
	if cli.code&0xff != 255 {
		t.Errorf("client status %d, want 255 (-1)", cli.code)
	}
	want := "client DISCONNECT EVENT...\nwait for RDMA_WRITE_ADV state 10\nrping: incomplete run: 0 of 4 iterations completed: the server closed the connection\n"
	if cli.err != want {
		t.Errorf("client stderr %q\nwant %q", cli.err, want)
	}
	if want := "rping latency: 0 iterations\nrping bandwidth: 0 iterations, 0 bytes in 0.0us: 0.000 MB/s\n"; cli.out != want {
		t.Errorf("client stdout %q\nwant %q", cli.out, want)
	}
}
