package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rdmanet/rdmanet/dat"
)

func TestParamsRoundTrip(t *testing.T) {
	p := params{test: testLat, echo: true, size: 1 << 20, iters: 12345, warmup: 7}
	b := p.append(nil)
	if len(b) != paramsLen {
		t.Fatalf("encoded %d bytes, want %d", len(b), paramsLen)
	}
	// InfiniBand pads private data with zeros to 56 bytes.
	got, err := parseParams(append(b, make([]byte, 56-len(b))...))
	if err != nil || got != p {
		t.Fatalf("parseParams = %+v, %v; want %+v", got, err, p)
	}
	for _, bad := range [][]byte{nil, b[:paramsLen-1], append([]byte("XXXX"), b[4:]...)} {
		if _, err := parseParams(bad); err == nil {
			t.Errorf("parseParams(% x) accepted", bad)
		}
	}
	zero := params{test: testBW, size: 0, iters: 1}
	if _, err := parseParams(zero.append(nil)); err == nil {
		t.Error("size 0 accepted")
	}
}

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags(strings.Fields("-c 192.0.2.1 --ia verbs:192.0.2.1 --test lat --size 64 --iters 50"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.server || cfg.test != testLat || cfg.size != 64 || cfg.iters != 50 || cfg.warmup != 5 || cfg.api != apiRdmanet {
		t.Errorf("parsed %+v", cfg)
	}
	if a, err := cfg.dialAddr(); err != nil || a.String() != "192.0.2.1:18600" {
		t.Errorf("dialAddr = %v, %v", a, err)
	}
	if cfg.wait != (dat.PollPolicy{}) {
		t.Errorf("default --wait = %+v, want the zero PollPolicy", cfg.wait)
	}
	busy, err := parseFlags(strings.Fields("-c 1.2.3.4 --ia x --wait busy"), io.Discard)
	if err != nil || busy.wait.Mode != dat.PollBusy {
		t.Errorf("--wait busy: %+v, %v", busy, err)
	}
	spin, err := parseFlags(strings.Fields("-c 1.2.3.4 --ia x --wait adaptive --spin 20us"), io.Discard)
	if err != nil || spin.wait != (dat.PollPolicy{Mode: dat.PollAdaptive, Spin: 20 * time.Microsecond}) {
		t.Errorf("--spin 20us: %+v, %v", spin, err)
	}
	srv, err := parseFlags(strings.Fields("-s --ia verbs:192.0.2.1 --port 7000"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := srv.listenAddr(); got != "192.0.2.1:7000" {
		t.Errorf("listenAddr = %q", got)
	}
	for _, bad := range []string{
		"",                            // neither side
		"-s -c 1.2.3.4 --ia iwarp",    // both
		"-s",                          // no IA
		"-s --ia iwarp --api foo",     // unknown API
		"-c 1.2.3.4 --ia x --test up", // unknown test
		"-c 1.2.3.4 --ia x --size 0",
		"-c 1.2.3.4 --ia x --iters 0",
		"-c 1.2.3.4 --ia x --api dat --echo",
		"-c 1.2.3.4 --ia x --poll",
		"-s --ia x extra",
		"-s --ia x --bind nohost",
		"-c 1.2.3.4 --ia x --wait sometimes",
	} {
		if _, err := parseFlags(strings.Fields(bad), io.Discard); err == nil {
			t.Errorf("parseFlags(%q) accepted", bad)
		}
	}
}

func TestIAAddress(t *testing.T) {
	for in, want := range map[string]string{
		"verbs:192.0.2.1": "192.0.2.1", "iwarp:127.0.0.1 crc=1": "127.0.0.1",
		"iwarp": "", "verbs:rxe_if0": "", "lo": "",
	} {
		if got := iaAddress(in); got != want {
			t.Errorf("iaAddress(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLatencySummary(t *testing.T) {
	l := newLatencies(100)
	for i := 1; i <= 100; i++ {
		l.add(time.Duration(i) * 2 * time.Microsecond) // half RTTs 1..100 µs
	}
	s := l.summary()
	if s.min != 1 || s.max != 100 || s.p50 != 50 || s.p99 != 99 || s.avg != 50.5 {
		t.Errorf("summary = %+v", s)
	}
	if (&latencies{}).summary() != (latSummary{}) {
		t.Error("empty summary not zero")
	}
}

func TestReportLine(t *testing.T) {
	cfg := &config{server: false, api: apiRdmanet, ia: "iwarp:127.0.0.1 crc=1"}
	r := &report{cfg: cfg, p: params{test: testBW, size: 1 << 20, iters: 4}, bytes: 4 << 20, elapsed: time.Second}
	want := "rdmaperf role=client api=rdmanet ia=iwarp:127.0.0.1,crc=1 test=bw echo=0 size=1048576 iters=4 warmup=0 bytes=4194304 secs=1.000000 MiBps=4.000 Gbps=0.0336"
	if got := r.String(); got != want {
		t.Errorf("report\n got %s\nwant %s", got, want)
	}
}
