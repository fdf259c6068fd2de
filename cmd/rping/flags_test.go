package main

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
)

// fakeResolver knows "server.example" and nothing else.
func fakeResolver(_ context.Context, host string) ([]netip.Addr, error) {
	if host == "server.example" {
		return []netip.Addr{netip.MustParseAddr("192.0.2.7")}, nil
	}
	if host == "flaky.example" {
		return nil, &net.DNSError{Err: "timeout", Name: host, IsTimeout: true}
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func noEnv(string) string { return "" }

func envOf(kv ...string) func(string) string {
	return func(k string) string {
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i] == k {
				return kv[i+1]
			}
		}
		return ""
	}
}

var usageText = func() string {
	var b bytes.Buffer
	usage(&b)
	return b.String()
}()

func TestUsageTextExact(t *testing.T) {
	// rdma-core 44's text, as its rping prints it on stdout.
	want := "rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port]\n" +
		"rping -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]\n" +
		"\t-c\t\tclient side\n" +
		"\t-I\t\tSource address to bind to for client.\n" +
		"\t-s\t\tserver side.  To bind to any address with IPv6 use -a ::0\n" +
		"\t-v\t\tdisplay ping data to stdout\n" +
		"\t-V\t\tvalidate ping data\n" +
		"\t-d\t\tdebug printfs\n" +
		"\t-S size \tping data size\n" +
		"\t-C count\tping count times\n" +
		"\t-a addr\t\taddress\n" +
		"\t-p port\t\tport\n" +
		"\t-P\t\tpersistent server mode allowing multiple connections\n" +
		"\t-q\t\tuse self-created, self-modified QP\n"
	if usageText != want {
		t.Fatalf("usage text differs:\n%s", usageText)
	}
}

func TestParseArgs(t *testing.T) {
	ip := netip.MustParseAddr
	type want struct {
		ret    int
		done   bool
		stdout string
		stderr string
		check  func(c config) bool
	}
	ok := func(f func(c config) bool) want { return want{check: f} }
	usageErr := want{ret: 22, done: true, stdout: usageText}
	cases := []struct {
		name string
		args []string
		env  func(string) string
		want want
	}{
		{"no args", nil, nil, usageErr},
		{"neither -s nor -c", []string{"-v", "-C", "3"}, nil, usageErr},
		{"defaults client", []string{"-c"}, nil, ok(func(c config) bool {
			return c.server == 0 && c.port == 7174 && c.size == 64 && c.count == 0 && c.addr == ip("0.0.0.0") &&
				!c.src.IsValid() && c.verbose == 0 && c.validate == 0 && c.debug == 0 && !c.persistent && !c.selfQP &&
				c.provider == "iwarp" && !c.latency && !c.bandwidth && !c.diagnose
		})},
		{"server", []string{"-s"}, nil, ok(func(c config) bool { return c.server == 1 })},
		{"last of -s/-c wins", []string{"-s", "-c"}, nil, ok(func(c config) bool { return c.server == 0 })},
		{"every flag separate", []string{"-c", "-a", "192.0.2.1", "-I", "192.0.2.2", "-p", "9999", "-S", "100", "-C", "7", "-v", "-V", "-d", "-P", "-q"}, nil,
			ok(func(c config) bool {
				return c.addr == ip("192.0.2.1") && c.src == ip("192.0.2.2") && c.port == 9999 && c.size == 100 &&
					c.count == 7 && c.verbose == 1 && c.validate == 1 && c.debug == 1 && c.persistent && c.selfQP
			})},
		{"attached arguments", []string{"-c", "-a192.0.2.1", "-p9999", "-S100", "-C7"}, nil, ok(func(c config) bool {
			return c.addr == ip("192.0.2.1") && c.port == 9999 && c.size == 100 && c.count == 7
		})},
		{"combined flags", []string{"-cvVvdq"}, nil, ok(func(c config) bool {
			return c.server == 0 && c.verbose == 2 && c.validate == 1 && c.debug == 1 && c.selfQP
		})},
		{"combined with argument at the end", []string{"-vVcp", "1234"}, nil, ok(func(c config) bool {
			return c.server == 0 && c.port == 1234 && c.verbose == 1
		})},
		{"combined with attached argument", []string{"-sPp1234"}, nil, ok(func(c config) bool {
			return c.server == 1 && c.persistent && c.port == 1234
		})},
		{"argument that looks like an option", []string{"-c", "-C", "-v"}, nil, ok(func(c config) bool {
			return c.count == 0 && c.verbose == 0 // atoi("-v") is 0
		})},
		{"IPv6 any", []string{"-s", "-a", "::0"}, nil, ok(func(c config) bool { return c.addr == ip("::") })},
		{"host name", []string{"-c", "-a", "server.example"}, nil, ok(func(c config) bool { return c.addr == ip("192.0.2.7") })},
		{"non-options are ignored", []string{"extra", "-c", "more", "-C", "2"}, nil, ok(func(c config) bool {
			return c.server == 0 && c.count == 2
		})},
		{"-- ends the options", []string{"-c", "--", "-x"}, nil, ok(func(c config) bool { return c.server == 0 })},
		{"POSIXLY_CORRECT stops at a non-option", []string{"-c", "word", "-x"}, envOf("POSIXLY_CORRECT", "1"), ok(func(c config) bool { return c.server == 0 })},
		{"without POSIXLY_CORRECT the option after a word counts", []string{"-c", "word", "-x"}, nil, usageErr},
		{"port truncated to 16 bits", []string{"-c", "-p", "70000"}, nil, ok(func(c config) bool { return c.port == 70000-65536 })},
		{"atoi takes leading digits", []string{"-c", "-p", " 12ab", "-C", "3x"}, nil, ok(func(c config) bool { return c.port == 12 && c.count == 3 })},
		{"atoi of junk is 0", []string{"-c", "-p", "abc"}, nil, ok(func(c config) bool { return c.port == 0 })},
		{"size 23", []string{"-c", "-S", "23"}, nil, ok(func(c config) bool { return c.size == 23 })},
		{"size 65535", []string{"-c", "-S", "65535"}, nil, ok(func(c config) bool { return c.size == 65535 })},
		{"size 22", []string{"-c", "-S", "22"}, nil, want{ret: 22, done: true, stderr: "Invalid size 22 (valid range is 23 to 65536)\n"}},
		{"size 65536", []string{"-c", "-S", "65536"}, nil, want{ret: 22, done: true, stderr: "Invalid size 65536 (valid range is 23 to 65536)\n"}},
		{"size junk", []string{"-c", "-S", "big"}, nil, want{ret: 22, done: true, stderr: "Invalid size 0 (valid range is 23 to 65536)\n"}},
		{"count 0 is forever", []string{"-c", "-C", "0"}, nil, ok(func(c config) bool { return c.count == 0 })},
		{"negative count", []string{"-c", "-C", "-1"}, nil, want{ret: 22, done: true, stderr: "Invalid count -1\n"}},
		{"range errors do not stop parsing", []string{"-S", "5", "-C", "-2", "-c"}, nil,
			want{ret: 22, done: true, stderr: "Invalid size 5 (valid range is 23 to 65536)\nInvalid count -2\n"}},
		{"a later -a clears the error, as in rping", []string{"-S", "5", "-a", "127.0.0.1", "-c"}, nil,
			want{stderr: "Invalid size 5 (valid range is 23 to 65536)\n", check: func(c config) bool { return c.size == 5 }}},
		{"unresolvable -a", []string{"-c", "-a", "nosuch.invalid"}, nil,
			want{ret: -2, done: true, stdout: "getaddrinfo failed (Name or service not known) - invalid hostname or IP address\n"}},
		{"temporary resolver failure", []string{"-c", "-I", "flaky.example"}, nil,
			want{ret: -3, done: true, stdout: "getaddrinfo failed (Temporary failure in name resolution) - invalid hostname or IP address\n"}},
		{"-t is accepted by getopt, then usage", []string{"-c", "-t", "5"}, nil, usageErr},
		{"-t without its argument", []string{"-c", "-t"}, nil, usageErr},
		{"unknown flag", []string{"-c", "-x"}, nil, usageErr},
		{"unknown flag stops at once", []string{"-x", "-S", "5"}, nil, usageErr},
		{"missing argument", []string{"-c", "-a"}, nil, usageErr},
		{"-h is not an option", []string{"-h"}, nil, usageErr},
		{"provider flag", []string{"-c", "--provider", "verbs"}, nil, ok(func(c config) bool { return c.provider == "verbs" })},
		{"provider flag with =", []string{"-c", "--provider=iwarp:198.51.100.1"}, nil, ok(func(c config) bool { return c.provider == "iwarp:198.51.100.1" })},
		{"--ia alias", []string{"--ia", "lo-iw", "-c"}, nil, ok(func(c config) bool { return c.provider == "lo-iw" })},
		{"long prefix", []string{"-c", "--lat", "--band", "--diag"}, nil, ok(func(c config) bool { return c.latency && c.bandwidth && c.diagnose })},
		{"environment picks the provider", []string{"-c"}, envOf("RPING_PROVIDER", "verbs"), ok(func(c config) bool { return c.provider == "verbs" })},
		{"flag beats environment", []string{"-c", "--provider", "iwarp"}, envOf("RPING_PROVIDER", "verbs"), ok(func(c config) bool { return c.provider == "iwarp" })},
		{"unknown long option", []string{"-c", "--nope"}, nil, usageErr},
		{"long option missing its argument", []string{"-c", "--provider"}, nil, usageErr},
		{"argument to a flag without one", []string{"-c", "--latency=1"}, nil, usageErr},
		{"bare -- is not an option name", []string{"-c", "--=x"}, nil, usageErr},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := c.env
			if env == nil {
				env = noEnv
			}
			var out, errb bytes.Buffer
			cfg, ret, done := parseArgs(c.args, env, fakeResolver, &out, &errb)
			if ret != c.want.ret || done != c.want.done {
				t.Errorf("ret, done = %d, %v; want %d, %v", ret, done, c.want.ret, c.want.done)
			}
			if out.String() != c.want.stdout {
				t.Errorf("stdout = %q, want %q", out.String(), c.want.stdout)
			}
			if errb.String() != c.want.stderr {
				t.Errorf("stderr = %q, want %q", errb.String(), c.want.stderr)
			}
			if c.want.check != nil && !c.want.check(cfg) {
				t.Errorf("config %+v", cfg)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	var out, errb bytes.Buffer
	_, ret, done := parseArgs([]string{"--help"}, noEnv, fakeResolver, &out, &errb)
	if ret != 0 || !done || !strings.HasPrefix(out.String(), usageText) || errb.Len() != 0 {
		t.Fatalf("--help: ret %d done %v stderr %q", ret, done, errb.String())
	}
	for _, s := range []string{"--provider", "RPING_PROVIDER", "--latency", "--bandwidth", "--diagnose"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("--help does not mention %s", s)
		}
	}
}

func TestAtoi(t *testing.T) {
	for s, want := range map[string]int{
		"": 0, "0": 0, "42": 42, "-42": -42, "+7": 7, "  9": 9, "\t-3x": -3, "x1": 0, "- 1": 0,
		"2147483647": 2147483647, "2147483648": -2147483648, "4294967296": 0,
		"99999999999999999999": -1, "-99999999999999999999": 0,
	} {
		if got := atoi(s); got != want {
			t.Errorf("atoi(%q) = %d, want %d", s, got, want)
		}
	}
}

func TestIAName(t *testing.T) {
	ip := netip.MustParseAddr
	cases := []struct {
		cfg  config
		want string
	}{
		{config{server: 1, provider: "iwarp", addr: ip("0.0.0.0")}, "iwarp"},
		{config{server: 1, provider: "iwarp", addr: ip("::")}, "iwarp"},
		{config{server: 1, provider: "iwarp", addr: ip("127.0.0.1")}, "iwarp:127.0.0.1"},
		{config{server: 1, provider: "iwarp:198.51.100.1", addr: ip("127.0.0.1")}, "iwarp:198.51.100.1"},
		{config{server: 0, provider: "iwarp", addr: ip("127.0.0.1")}, "iwarp"},
		{config{server: 0, provider: "iwarp", addr: ip("127.0.0.1"), src: ip("127.0.0.2")}, "iwarp:127.0.0.2"},
		{config{server: 0, provider: "verbs", src: ip("192.0.2.1")}, "verbs:192.0.2.1"},
		{config{server: 0, provider: "verbs", addr: ip("127.0.0.1")}, "verbs:127.0.0.1"}, // the route's source
		{config{server: 0, provider: "iwarp", addr: ip("127.0.0.1")}, "iwarp"},
		{config{server: 1, provider: "lo-iw", addr: ip("127.0.0.1")}, "lo-iw"}, // a registry name
	}
	for _, c := range cases {
		if got := iaName(&c.cfg); got != c.want {
			t.Errorf("iaName(%+v) = %q, want %q", c.cfg, got, c.want)
		}
	}
}
