package main

import (
	"fmt"
	"io"
)

// usage prints rping's usage text, byte for byte as rdma-core prints it:
// on stdout, with the program name always "rping".
func usage(w io.Writer) {
	fmt.Fprint(w, "rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port]\n"+
		"rping -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]\n"+
		"\t-c\t\tclient side\n"+
		"\t-I\t\tSource address to bind to for client.\n"+
		"\t-s\t\tserver side.  To bind to any address with IPv6 use -a ::0\n"+
		"\t-v\t\tdisplay ping data to stdout\n"+
		"\t-V\t\tvalidate ping data\n"+
		"\t-d\t\tdebug printfs\n"+
		"\t-S size \tping data size\n"+
		"\t-C count\tping count times\n"+
		"\t-a addr\t\taddress\n"+
		"\t-p port\t\tport\n"+
		"\t-P\t\tpersistent server mode allowing multiple connections\n"+
		"\t-q\t\tuse self-created, self-modified QP\n")
}

// extraUsage documents what only this rping has. It is printed by --help
// alone, so that the plain usage stays identical to rdma-core's.
func extraUsage(w io.Writer) {
	fmt.Fprintf(w, `
rdmanet extensions (long options only; the short options above behave as
in rdma-core's rping):
	--provider NAME	DAT IA to use (also --ia NAME; default %[1]s): a provider
			name ("iwarp", the pure-Go iWARP over TCP; "verbs", the
			kernel RDMA devices, in binaries built with -tags verbs),
			"provider:args" (e.g. "iwarp:198.51.100.1"), or an IA name
			from the DAT registry (/etc/rdmanet/dat.conf or the file
			named by $RDMANET_DAT_CONF). Without args, the server's -a
			address and the client's -I address become the IA address.
	--latency	client: print min/mean/p50/p99/max round-trip time of
			the ping iterations at the end
	--bandwidth	client: print the RDMA Read + Write throughput in MB/s
			(10^6 bytes per second) at the end
	--diagnose	explain a failed connection in one line on stderr:
			unreachable, rejected, timed out, or no RDMA device
	--help		this text

Environment:
	%[2]s	DAT IA name used when --provider is not given
	RDMANET_DAT_CONF	DAT registry file (default /etc/rdmanet/dat.conf)
	POSIXLY_CORRECT	stop option parsing at the first non-option word

Exit status: 0 on success; 22 (EINVAL) for a usage error; 255 when the
connection fails or breaks (rping's exit(-1)); 19 (ENODEV) when no RDMA
device can be opened; otherwise the failing step's error number. As in
rdma-core, a client whose server disconnects mid-run exits 0; with
--latency or --bandwidth it fails instead (255, or the failing step's
error number, 128+N on signal N) whenever fewer than -C iterations
completed, and says so on stderr:
	rping: incomplete run: N of M iterations completed: REASON
`, defaultProvider, providerEnv)
}
