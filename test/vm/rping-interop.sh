#!/bin/bash
# rping-interop.sh - cmd/rping against rdma-core's rping and the kernel's
# RDMA providers, in the test VM.
#
#   go build -o bin/rping ./cmd/rping          # on the host, then
#   sudo test/vm/run.sh test/vm/rping-interop.sh
#   sudo test/vm/rping-interop.sh              # on the host: builds, then the above
#
# Checks (one PASS/FAIL/SKIP line each, then "N passed, N failed[, N skipped]"):
#   iwarp-client-*   our client, pure-Go iWARP bound to $RDMA_SIW_ADDR, against
#                    rdma-core's server on the kernel's siw0
#   iwarp-server-*   rdma-core's client on siw0 against our pure-Go iWARP server
#   wire-*           tcpdump of a -C 3 -S 64 run of each direction, decoded with
#                    tshark, compared FPDU by FPDU with the reference capture
#                    test/vm/testdata/siw-rping-C3-S64.pcapng (kernel
#                    against kernel), and checked for tshark warnings
#   verbs-*          the same with a verbs-provider binary (bin/rping-verbs,
#                    built with -tags verbs) over rxe0 and siw0; SKIP without one
# Every run asserts both sides' exit status (0), their exact stdout (the ping
# lines of -v) and their exact stderr (the DISCONNECT lines).
#
# Knobs: RPING_GO (our binary, default bin/rping), RPING_GO_VERBS (default
# bin/rping-verbs), RPING_INTEROP_COUNT (iterations of the main runs, 1000),
# RPING_INTEROP_OUT (logs and captures, default bin/rping-interop),
# RPING_REF_CAPTURE (the reference pcapng), RPING_INTEROP_TIMEOUT (per rping
# process, 300 s).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/../.." && pwd -P)

# ------------------------------------------------------------- host side
if [ -z "${IN_RDMA_VM:-}" ]; then
	cd "$REPO" || exit 1
	# Same rule as suite.sh: skip, saying why, only where the VM cannot run.
	if [ "$(id -u)" != 0 ]; then
		echo "SKIP rping interop: needs root (the VM shares / over 9p); not running as root"
		echo "0 passed, 0 failed, 1 skipped"
		exit 0
	fi
	if ! command -v qemu-system-x86_64 >/dev/null && ! bash "$HERE/setup.sh" >&2; then
		echo "SKIP rping interop: qemu and the guest kernel could not be installed"
		echo "0 passed, 0 failed, 1 skipped"
		exit 0
	fi
	mkdir -p bin
	echo "building bin/rping" >&2
	go build -o bin/rping ./cmd/rping || exit 1
	# a verbs-tagged binary counts only once the verbs provider is registered
	if CGO_ENABLED=1 go build -tags verbs -o bin/rping-verbs.tmp ./cmd/rping 2>bin/rping-verbs.build.log &&
		! bin/rping-verbs.tmp -c --provider verbs -a 127.0.0.1 -C 1 2>&1 | grep -q 'not in this binary'; then
		mv bin/rping-verbs.tmp bin/rping-verbs
		echo "built bin/rping-verbs" >&2
	else
		rm -f bin/rping-verbs.tmp bin/rping-verbs
		echo "no verbs build (see bin/rping-verbs.build.log); verbs checks will SKIP" >&2
	fi
	exec "$HERE/run.sh" "$HERE/rping-interop.sh" "$@"
fi

# ------------------------------------------------------------ guest side
SIW=${RDMA_SIW_ADDR:?not in the RDMA VM}
RXE=${RDMA_RXE_ADDR:?not in the RDMA VM}
BIN=${RPING_GO:-$REPO/bin/rping}
VBIN=${RPING_GO_VERBS:-$REPO/bin/rping-verbs}
COUNT=${RPING_INTEROP_COUNT:-1000}
OUT=${RPING_INTEROP_OUT:-$REPO/bin/rping-interop}
REF=${RPING_REF_CAPTURE:-$HERE/testdata/siw-rping-C3-S64.pcapng}
export LC_ALL=C
mkdir -p "$OUT"
npass=0 nfail=0 nskip=0
PORT=7600
TMO=${RPING_INTEROP_TIMEOUT:-300} # per rping process, seconds

result() { # result PASS|FAIL|SKIP NAME [why]
	case $1 in
	PASS) npass=$((npass + 1)) ;;
	FAIL) nfail=$((nfail + 1)) ;;
	SKIP) nskip=$((nskip + 1)) ;;
	esac
	echo "$1 $2${3:+ ($3)}"
}

# expected PREFIX SIZE COUNT: the -v lines for COUNT iterations of SIZE bytes
expected() {
	awk -v p="$1" -v size="$2" -v n="$3" 'BEGIN {
		for (i = 0; i < n; i++) {
			s = "rdma-ping-" i ": "
			if (length(s) > size - 1) s = substr(s, 1, size - 1)
			c = 65 + i % 58
			for (j = length(s); j < size - 1; j++) {
				s = s sprintf("%c", c)
				if (++c > 122) c = 65
			}
			print p s
		}
	}'
}

# listening ADDR PORT: an rdma_cm listener (rxe/siw) or a TCP listener (siw, ours)
listening() {
	ss -Hltn "sport = :$2" 2>/dev/null | grep -q "$1:$2" && return 0
	rdma res show cm_id 2>/dev/null | grep -q "state LISTEN .*src-addr $1:$2 "
}

# capture_start FILE PORT / capture_stop: tcpdump on lo (own-address traffic)
CAP_PID=
capture_start() {
	local i
	tcpdump -i lo -U -w "$1" "tcp port $2" 2>"$1.log" &
	CAP_PID=$! CAP_FILE=$1
	for ((i = 0; i < 100; i++)); do
		grep -q listening "$1.log" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}
CAP_FILE=
capture_stop() {
	[ -n "$CAP_PID" ] || return 0
	# tcpdump under TCG lags behind the packets it was handed: stop it only
	# once its file has not grown for a second (at most 30 s)
	local i size=-1 now
	for ((i = 0; i < 30; i++)); do
		sleep 1
		now=$(stat -c %s "$CAP_FILE" 2>/dev/null || echo 0)
		[ "$now" = "$size" ] && break
		size=$now
	done
	kill -INT "$CAP_PID" 2>/dev/null
	wait "$CAP_PID" 2>/dev/null
	CAP_PID=
}

# pair NAME ADDR SIZE COUNT CAPTURE SERVER-CMD... -- CLIENT-CMD...
# Runs the server, waits for its listener, runs the client; checks status and
# exact output of both. "@PORT@" in the commands is replaced by a fresh port.
pair() {
	local name=$1 addr=$2 size=$3 n=$4 cap=$5
	shift 5
	local port=$((PORT++)) scmd=() ccmd=() a dir=$OUT/$1 i
	for a in "$@"; do
		[ "$a" = -- ] && {
			scmd=("${ccmd[@]}")
			ccmd=()
			continue
		}
		ccmd+=("${a//@PORT@/$port}")
	done
	mkdir -p "$dir"
	if [ "$cap" != - ]; then
		capture_start "$cap" "$port" || {
			result FAIL "$name" "tcpdump did not start"
			return
		}
	fi
	echo "${scmd[*]}" >"$dir/server.cmd"
	echo "${ccmd[*]}" >"$dir/client.cmd"
	timeout "$TMO" "${scmd[@]}" >"$dir/server.out" 2>"$dir/server.err" &
	local spid=$! src=0 crc=0 why=
	for ((i = 0; i < 300; i++)); do
		listening "$addr" "$port" && break
		kill -0 "$spid" 2>/dev/null || break
		sleep 0.1
	done
	if ! listening "$addr" "$port"; then
		kill "$spid" 2>/dev/null
		wait "$spid"
		capture_stop
		result FAIL "$name" "server never listened on $addr:$port: $(head -c 300 "$dir/server.err")"
		return
	fi
	timeout "$TMO" "${ccmd[@]}" >"$dir/client.out" 2>"$dir/client.err" || crc=$?
	for ((i = 0; i < 100; i++)); do
		kill -0 "$spid" 2>/dev/null || break
		sleep 0.1
	done
	kill "$spid" 2>/dev/null && why="server still running 10 s after the client; "
	wait "$spid" || src=$?
	capture_stop
	[ "$crc" = 0 ] || why+="client rc $crc; "
	[ "$src" = 0 ] || why+="server rc $src; "
	expected "ping data: " "$size" "$n" >"$dir/client.want"
	expected "server ping data: " "$size" "$n" >"$dir/server.want"
	printf 'client DISCONNECT EVENT...\n' >"$dir/client.errwant"
	printf 'server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n' >"$dir/server.errwant"
	cmp -s "$dir/client.out" "$dir/client.want" || why+="client stdout differs ($(wc -l <"$dir/client.out") lines); "
	cmp -s "$dir/server.out" "$dir/server.want" || why+="server stdout differs ($(wc -l <"$dir/server.out") lines); "
	cmp -s "$dir/client.err" "$dir/client.errwant" || why+="client stderr: $(head -c 200 "$dir/client.err" | tr '\n' '|'); "
	cmp -s "$dir/server.err" "$dir/server.errwant" || why+="server stderr: $(head -c 200 "$dir/server.err" | tr '\n' '|'); "
	if [ -z "$why" ]; then
		result PASS "$name" "$n x $size bytes"
	else
		result FAIL "$name" "${why%; }"
		for f in client.out server.out; do
			diff "$dir/${f%.out}.want" "$dir/$f" | head -5 | sed "s/^/    | $f: /"
		done
	fi
}

# fpdus PCAP SERVERPORT: one normalised line per MPA frame or FPDU:
# direction, frame type and the header fields that do not depend on
# addresses, ports, STag or TO values (multi-FPDU segments are split); and
# the FIN/RST of the teardown.
fpdus() {
	tshark -r "$1" -T fields -E separator='|' -E occurrence=a -E aggregator=',' \
		-e tcp.srcport -e iwarp_mpa.key.req -e iwarp_mpa.key.rep -e iwarp_mpa.res -e iwarp_mpa.crc_flag \
		-e iwarp_mpa.rev -e iwarp_mpa.pdlength -e iwarp_mpa.privatedata -e iwarp_mpa.ulpdulength \
		-e iwarp_ddp.tagged_flag -e iwarp_ddp.last_flag -e iwarp_ddp.qn -e iwarp_ddp.msn -e iwarp_ddp.mo \
		-e iwarp_rdma.opcode -e iwarp_rdma.rdmardsz -e iwarp_mpa.crc -e tcp.flags.fin -e tcp.flags.reset 2>/dev/null |
		awk -F'|' -v sp="$2" '
		function at(s, k,   a, n) { n = split(s, a, ","); return k <= n ? a[k] : "" }
		{
			dir = ($1 == sp) ? "S>C" : "C>S"
			if ($2 != "" || $3 != "") {
				printf "%s MPA-%s res=%s crc=%s rev=%s pdlen=%s pd=%s\n", dir, ($2 != "" ? "Request" : "Reply"), $4, $5, $6, $7, $8
				next
			}
			n = split($9, u, ",")
			for (k = 1; k <= n; k++) {
				op = at($15, k); t = at($10, k)
				name = (op == "0x00") ? "RDMA-Write" : (op == "0x01") ? "Read-Request" : (op == "0x02") ? "Read-Response" : \
					(op == "0x03") ? "Send" : (op == "0x07") ? "Terminate" : "op" op
				if (t == "1")
					printf "%s %s tagged L=%s ulpdu=%s crc=%s\n", dir, name, at($11, k), u[k], at($17, k)
				else
					printf "%s %s QN=%s MSN=%s MO=%s L=%s ulpdu=%s rdsz=%s crc=%s\n", dir, name, at($12, k), at($13, k), at($14, k), at($11, k), u[k], at($16, k), at($17, k)
			}
			if ($18 == "1" || $18 == "True") printf "%s TCP-FIN\n", dir
			if ($19 == "1" || $19 == "True") printf "%s TCP-RST\n", dir
		}'
}

# warns PCAP: tshark's expert warnings and errors, one line each
warns() {
	tshark -r "$1" -q -z expert,warn 2>/dev/null | awk '/^ +[0-9]+ +/ { $1 = $1; print }' | sort
}

# wire NAME PCAP: compare with the reference capture
wire() {
	local name=$1 pcap=$2 dir=$OUT/$1
	mkdir -p "$dir"
	if [ ! -s "$pcap" ]; then
		result FAIL "$name" "no capture"
		return
	fi
	fpdus "$REF" 7174 >"$dir/reference.fpdus"
	fpdus "$pcap" "$(cat "$pcap.port")" >"$dir/ours.fpdus"
	warns "$REF" >"$dir/reference.warns"
	warns "$pcap" >"$dir/ours.warns"
	local why='' drop
	# (on lo every packet passes the filter twice, so "received by filter"
	# is twice "captured"; only kernel drops mean a lost packet)
	drop=$(sed -n 's/^\([0-9]*\) packets dropped by kernel$/\1/p' "$pcap.log")
	[ "${drop:-x}" = 0 ] || why+="capture incomplete (${drop:-?} packets dropped by the kernel); "
	if ! diff -u "$dir/reference.fpdus" "$dir/ours.fpdus" >"$dir/fpdus.diff"; then
		why+="FPDU sequence differs ($(grep -c '^[-+][^-+]' "$dir/fpdus.diff") lines, see $dir/fpdus.diff); "
	fi
	if ! diff -u "$dir/reference.warns" "$dir/ours.warns" >"$dir/warns.diff"; then
		why+="tshark warnings differ; "
	fi
	if [ -z "$why" ]; then
		result PASS "$name" "$(wc -l <"$dir/ours.fpdus") MPA frames/FPDUs as in the reference"
	else
		result FAIL "$name" "${why%; }"
		sed 's/^/    | /' "$dir/fpdus.diff" "$dir/warns.diff" | head -40
	fi
	# TCP segmentation is the provider's business; report it for the record
	echo "    info $name: $(tshark -r "$pcap" -Y 'tcp.len > 0' 2>/dev/null | wc -l) data segments (reference $(tshark -r "$REF" -Y 'tcp.len > 0' 2>/dev/null | wc -l))"
}

echo "rping interop: ours $BIN, rdma-core $(command -v rping), siw0 $SIW, rxe0 $RXE, $COUNT iterations"
if [ ! -x "$BIN" ]; then
	result FAIL build "no $BIN: build it on the host first (go build -o bin/rping ./cmd/rping)"
	echo "$npass passed, $nfail failed"
	exit 1
fi
IW="--provider=iwarp:$SIW"

# --- our pure-Go iWARP against the kernel's siw
pair iwarp-client-S64 "$SIW" 64 "$COUNT" - rping -s -a "$SIW" -p @PORT@ -v -- "$BIN" -c -a "$SIW" -p @PORT@ -C "$COUNT" -V -v "$IW"
pair iwarp-server-S64 "$SIW" 64 "$COUNT" - "$BIN" -s -a "$SIW" -p @PORT@ -v "$IW" -- rping -c -a "$SIW" -p @PORT@ -C "$COUNT" -V -v
for s in 23:100 65535:10; do
	n=${s#*:} s=${s%:*}
	pair "iwarp-client-S$s" "$SIW" "$s" "$n" - rping -s -a "$SIW" -p @PORT@ -v -S "$s" -- "$BIN" -c -a "$SIW" -p @PORT@ -C "$n" -V -v -S "$s" "$IW"
	pair "iwarp-server-S$s" "$SIW" "$s" "$n" - "$BIN" -s -a "$SIW" -p @PORT@ -v -S "$s" "$IW" -- rping -c -a "$SIW" -p @PORT@ -C "$n" -V -v -S "$s"
done

# --- the wire, against the reference capture (kernel against kernel, -C 3 -S 64 -v)
for side in client server; do
	pcap=$OUT/wire-iwarp-$side.pcap
	rm -f "$pcap"
	echo "$PORT" >"$pcap.port"
	if [ "$side" = client ]; then
		pair "wire-run-iwarp-$side" "$SIW" 64 3 "$pcap" rping -s -a "$SIW" -p @PORT@ -v -- "$BIN" -c -a "$SIW" -p @PORT@ -C 3 -S 64 -v "$IW"
	else
		pair "wire-run-iwarp-$side" "$SIW" 64 3 "$pcap" "$BIN" -s -a "$SIW" -p @PORT@ -v "$IW" -- rping -c -a "$SIW" -p @PORT@ -C 3 -S 64 -v
	fi
	wire "wire-iwarp-$side" "$pcap"
done

# --- the verbs provider (cgo, -tags verbs) over the kernel devices
for dev in rxe siw; do
	addr=$RXE
	[ $dev = siw ] && addr=$SIW
	if [ ! -x "$VBIN" ]; then
		result SKIP "verbs-client-$dev" "no verbs-tagged binary $VBIN"
		result SKIP "verbs-server-$dev" "no verbs-tagged binary $VBIN"
		continue
	fi
	pair "verbs-client-$dev" "$addr" 64 "$COUNT" - rping -s -a "$addr" -p @PORT@ -v -- "$VBIN" -c -a "$addr" -p @PORT@ -C "$COUNT" -V -v --provider=verbs
	pair "verbs-server-$dev" "$addr" 64 "$COUNT" - "$VBIN" -s -a "$addr" -p @PORT@ -v --provider=verbs -- rping -c -a "$addr" -p @PORT@ -C "$COUNT" -V -v
done

if [ "$nskip" -gt 0 ]; then
	echo "$npass passed, $nfail failed, $nskip skipped"
else
	echo "$npass passed, $nfail failed"
fi
[ "$nfail" = 0 ]
