package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// binPath is the rdmaperf binary the end-to-end tests run as two
// processes, built once by TestMain.
var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rdmaperf-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "rdmaperf")
	if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building rdmaperf: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago
// (the iwarp provider's connection qualifier is its TCP port).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// server is a running rdmaperf -s process.
type server struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
	stderr bytes.Buffer // what was read of it so far
	done   chan error
}

// startServer runs the server and waits for its "listening" line.
func startServer(t *testing.T, args ...string) *server {
	t.Helper()
	s := &server{cmd: exec.Command(binPath, append([]string{"-s", "--timeout", "60s"}, args...)...), done: make(chan error, 1)}
	s.cmd.Stdout = &s.stdout
	pipe, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	listening := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		seen := false
		for sc.Scan() {
			s.stderr.WriteString(sc.Text() + "\n")
			if !seen && strings.HasPrefix(sc.Text(), "rdmaperf: listening ") {
				seen = true
				listening <- true
			}
		}
		if !seen {
			listening <- false
		}
		s.done <- s.cmd.Wait()
	}()
	t.Cleanup(func() { s.cmd.Process.Kill() })
	select {
	case ok := <-listening:
		if !ok {
			err := <-s.done
			t.Fatalf("server exited before listening: %v\n%s", err, s.stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("server did not report listening within 20s")
	}
	return s
}

// wait waits for the server to exit and returns its stdout.
func (s *server) wait(t *testing.T) string {
	t.Helper()
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("server: %v\nstdout:\n%s\nstderr:\n%s", err, s.stdout.String(), s.stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("server did not exit")
	}
	return s.stdout.String()
}

// runClient runs the client to completion and returns its stdout.
func runClient(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(binPath, append([]string{"--timeout", "60s"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("client %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// lineRE is the report format: "rdmaperf" and key=value pairs without
// spaces.
var lineRE = regexp.MustCompile(`^rdmaperf( [a-z_A-Z0-9]+=[^ =]+)+$`)

// parseLine checks the one-line format and returns the pairs.
func parseLine(t *testing.T, out string) map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 1 || !lineRE.MatchString(lines[0]) {
		t.Fatalf("want one report line, got %q", out)
	}
	kv := map[string]string{}
	for _, f := range strings.Fields(lines[0])[1:] {
		k, v, _ := strings.Cut(f, "=")
		if _, dup := kv[k]; dup {
			t.Fatalf("key %s twice in %q", k, lines[0])
		}
		kv[k] = v
	}
	return kv
}

// positive returns kv[key] as a number and fails unless it is > 0.
func positive(t *testing.T, kv map[string]string, key string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(kv[key], 64)
	if err != nil || !(v > 0) {
		t.Fatalf("%s=%q: want a positive number (report %v)", key, kv[key], kv)
	}
	return v
}

// TestEndToEnd runs every test of every API as two processes over the
// pure-Go iwarp provider on 127.0.0.1 and checks both reports.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const ia = "iwarp:127.0.0.1"
	cases := []struct {
		name, api string
		args      []string
		size      int
		iters     int
		echo      bool
	}{
		{"rdmanet-bw", "rdmanet", []string{"--test", "bw"}, 65536, 200, false},
		{"rdmanet-bw-echo", "rdmanet", []string{"--test", "bw", "--echo"}, 65536, 100, true},
		{"rdmanet-bw-1m", "rdmanet", []string{"--test", "bw"}, 1 << 20, 16, false},
		{"rdmanet-lat", "rdmanet", []string{"--test", "lat"}, 64, 300, false},
		{"dat-bw", "dat", []string{"--test", "bw", "--depth", "8"}, 65536, 200, false},
		{"dat-lat", "dat", []string{"--test", "lat"}, 64, 300, false},
		{"dat-lat-poll", "dat", []string{"--test", "lat", "--poll"}, 64, 100, false},
		{"tcp-lat", "tcp", []string{"--test", "lat"}, 64, 300, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			port := strconv.Itoa(freePort(t))
			srv := startServer(t, "--ia", ia, "--api", c.api, "--port", port)
			args := append([]string{"-c", "127.0.0.1", "--ia", ia, "--api", c.api, "--port", port,
				"--size", strconv.Itoa(c.size), "--iters", strconv.Itoa(c.iters)}, c.args...)
			cli := parseLine(t, runClient(t, args...))
			sv := parseLine(t, srv.wait(t))
			test := "bw"
			if strings.Contains(c.name, "lat") {
				test = "lat"
			}
			wantBytes := int64(c.size) * int64(c.iters)
			if c.echo || test == "lat" {
				wantBytes *= 2
			}
			for side, kv := range map[string]map[string]string{"client": cli, "server": sv} {
				want := map[string]string{"role": side, "api": c.api, "ia": ia, "test": test,
					"size": strconv.Itoa(c.size), "iters": strconv.Itoa(c.iters), "warmup": strconv.Itoa(c.iters / 10),
					"bytes": strconv.FormatInt(wantBytes, 10)}
				if c.echo {
					want["echo"] = "1"
				} else {
					want["echo"] = "0"
				}
				for k, v := range want {
					if kv[k] != v {
						t.Errorf("%s report: %s=%q, want %q (%v)", side, k, kv[k], v, kv)
					}
				}
				positive(t, kv, "secs")
				if test == "bw" {
					positive(t, kv, "MiBps")
					positive(t, kv, "Gbps")
				}
			}
			if test == "lat" {
				var prev float64
				for _, k := range []string{"lat_min_us", "lat_p50_us", "lat_p99_us", "lat_max_us"} {
					v := positive(t, cli, k)
					if v < prev {
						t.Errorf("%s=%v is below the previous percentile %v", k, v, prev)
					}
					prev = v
				}
				positive(t, cli, "lat_avg_us")
			}
		})
	}
}

// TestServerRejectsGarbage: a client that is not rdmaperf makes the
// server fail with a message, not hang or crash.
func TestServerRejectsGarbage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	port := freePort(t)
	srv := startServer(t, "--api", "tcp", "--bind", "127.0.0.1", "--port", strconv.Itoa(port))
	c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	c.Write(bytes.Repeat([]byte{'x'}, paramsLen))
	io.Copy(io.Discard, c)
	c.Close()
	select {
	case err := <-srv.done:
		if err == nil {
			t.Fatalf("server exited 0 after garbage; stdout %q", srv.stdout.String())
		}
		if !strings.Contains(srv.stderr.String(), "not an rdmaperf v1 header") {
			t.Errorf("server's error does not say why: %q", srv.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("server did not exit")
	}
}
