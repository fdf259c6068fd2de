#!/bin/bash
# guest/bench.sh RDMAPERF - bench.sh's guest side: rdmanet and the pure-Go
# iwarp provider against perftest, rstream and the kernel's siw, all in one
# guest boot, printed as one markdown table.
#
# RDMAPERF is a -tags verbs build of cmd/rdmaperf.  Logs go to ./logs (the
# cwd is the host's, shared read-write); the table to stdout and to
# ./table.md.  After a short warm-up run of every tool (which also pages
# the binaries in over 9p), every row runs its baseline and its rdmanet
# side REPS times, interleaved (baseline, ours, baseline, ours, ...); the
# table shows medians.  rdmaperf also warms up inside each connection
# (--warmup, iters/10).  A run whose server or client exits non-zero, or
# whose output has no value, makes its cell FAIL, and its output is
# printed under the table.
#
# Knobs: RDMANET_BENCH_REPS (3), RDMANET_BENCH_ONLY (a regex: run only the
# rows whose id matches), RDMANET_BENCH_RUN_TIMEOUT (seconds per process,
# 90).
set -uo pipefail

BIN=${1:?usage: bench.sh RDMAPERF}
RXE=${RDMA_RXE_ADDR:?not in the RDMA VM}
SIW=${RDMA_SIW_ADDR:?not in the RDMA VM}
REPS=${RDMANET_BENCH_REPS:-3}
ONLY=${RDMANET_BENCH_ONLY:-.}
RUN_TIMEOUT=${RDMANET_BENCH_RUN_TIMEOUT:-90}
LOGS=$PWD/logs
mkdir -p "$LOGS"
FAILS=$LOGS/failures
: >"$FAILS"
TABLE=$PWD/table.md
RAW=$LOGS/runs.txt
: >"$RAW"
PORT=20000

# ------------------------------------------------------------ workloads
# Sizes and counts: each run moves about 32-48 MB or makes 1000 round
# trips, a second or two under TCG.
BW64_N=500  # 64 KiB messages
BW1M_N=48   # 1 MiB messages
LAT_N=1000  # 64-byte round trips
RS_BW_N=250 # rstream 64 KiB transfers each way (500 in all)

# ------------------------------------------------------------- helpers
# listening DEV PORT: an rdma_cm listener on PORT is bound to device DEV
# (a wildcard listen shows one entry per device, and they appear one after
# the other; siw's TCP socket can be up before rxe0's entry), or, for DEV
# "tcp" (rstream -T s), a TCP listener.
listening() {
	if [ "$1" = tcp ]; then
		ss -Hltn "sport = :$2" 2>/dev/null | grep -q ":$2"
	else
		rdma res show cm_id 2>/dev/null | grep -Eq "^link $1/.* state LISTEN .*src-addr [^ ]*:$2 "
	fi
}

# devof ADDR: the RDMA device that owns ADDR here.
devof() {
	case $1 in
	"$RXE") echo rxe0 ;;
	*) echo siw0 ;;
	esac
}

# pair TAG READY -- SERVER... -- CLIENT...: start the server, wait until it
# is ready (READY "go": its "listening" line; "cm": an rdma_cm listener on
# device PORT_DEV and port PORT, or a TCP one), run the client, wait for
# the server.  Sets RC (0 or why it failed) and CLI (the client's log).
# Each process is bounded by RUN_TIMEOUT.
pair() {
	local tag=$1 ready=$2 i spid src=0 crc=0
	shift 2
	[ "$1" = -- ] && shift
	local srv=()
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		srv+=("$1")
		shift
	done
	shift
	local s=$LOGS/$tag.srv c=$LOGS/$tag.cli
	CLI=$c RC=0
	timeout -k 5 "$RUN_TIMEOUT" "${srv[@]}" >"$s" 2>&1 &
	spid=$!
	for ((i = 0; i < 200; i++)); do
		case $ready in
		go) grep -q '^rdmaperf: listening' "$s" && break ;;
		cm) listening "$PORT_DEV" "$PORT" && sleep 0.1 && break ;;
		esac
		kill -0 "$spid" 2>/dev/null || break
		sleep 0.05
	done
	if ! kill -0 "$spid" 2>/dev/null && ! grep -q '^rdmaperf: listening' "$s"; then
		wait "$spid"
		RC="server exited before listening (rc $?)"
		note_fail "$tag" "$RC" "${srv[*]}" "$*"
		return
	fi
	timeout -k 5 "$RUN_TIMEOUT" "$@" >"$c" 2>&1 || crc=$?
	if [ "$crc" != 0 ]; then
		# a failed client leaves the server waiting: do not wait it out
		sleep 1
		kill "$spid" 2>/dev/null
	fi
	wait "$spid" || src=$?
	if [ "$crc" != 0 ]; then
		RC="client rc $crc"
	elif [ "$src" != 0 ]; then
		RC="server rc $src"
	fi
	[ "$RC" = 0 ] || note_fail "$tag" "$RC" "${srv[*]}" "$*"
}

# note_fail TAG WHY SERVER-CMD CLIENT-CMD: remember a failed run for the
# report under the table.
note_fail() {
	{
		echo "### $1: $2"
		echo "server: $3"
		echo "client: $4"
		echo '```'
		echo "--- server output (last 30 lines)"
		tail -n 30 "$LOGS/$1.srv" 2>/dev/null
		echo "--- client output (last 30 lines)"
		tail -n 30 "$LOGS/$1.cli" 2>/dev/null
		echo '```'
	} >>"$FAILS"
}

# keyval KEY FILE: the value of KEY= in rdmaperf's client line.
keyval() {
	grep -a '^rdmaperf role=client ' "$2" | tr ' ' '\n' | sed -n "s/^$1=//p" | head -n1
}

# number V: V if it is a positive number, else empty.
number() {
	awk -v v="$1" 'BEGIN { if (v ~ /^[0-9]+(\.[0-9]+)?$/ && v + 0 > 0) print v }'
}

# ------------------------------------------------- one run of each tool
# Each sets VAL to the measured value, or FAIL.

# perftest TAG TOOL COLUMN DEV ADDR ARGS...: ib_write_bw/ib_send_lat in
# rdma_cm mode (-R); COLUMN of the result line (4: BW average [MiB/s];
# 5: t_typical [usec]).
perftest() {
	local tag=$1 tool=$2 col=$3 dev=$4 addr=$5 v
	shift 5
	PORT=$((PORT + 1)) PORT_DEV=$dev
	pair "$tag" cm -- "$tool" -R -F -d "$dev" -p "$PORT" "$@" -- "$tool" -R -F -d "$dev" -p "$PORT" "$@" "$addr"
	VAL=FAIL
	[ "$RC" = 0 ] || return
	v=$(awk -v c="$col" '$1 ~ /^[0-9]+$/ && NF >= c && hdr { print $c; exit } /^ *#bytes/ { hdr = 1 }' "$CLI")
	v=$(number "$v")
	if [ -n "$v" ]; then VAL=$v; else note_fail "$tag" "no result line" "$tool" "$tool"; fi
}

# rstream_run TAG WHAT ADDR ARGS...: rstream.  WHAT "lat" takes usec/xfer
# (the mean half round trip of -C 1), "gbps:SIZE" Gb/sec, computed from
# usec/xfer (printed with more digits than Gb/sec): SIZE*8/(1000*usec).
rstream_run() {
	local tag=$1 what=$2 addr=$3 v
	shift 3
	PORT=$((PORT + 1)) PORT_DEV=$(devof "$addr")
	case " $* " in *" -T s "*) PORT_DEV=tcp ;; esac
	pair "$tag" cm -- rstream -b "$addr" -p "$PORT" "$@" -- rstream -s "$addr" -p "$PORT" "$@"
	VAL=FAIL
	[ "$RC" = 0 ] || return
	v=$(awk '$1 == "custom" && NF >= 8 { print $8 }' "$CLI" | tail -n1)
	v=$(number "$v")
	if [ -n "$v" ] && [ "$what" != lat ]; then
		v=$(awk -v s="${what#gbps:}" -v u="$v" 'BEGIN { printf "%.4f", s * 8 / (1000 * u) }')
	fi
	if [ -n "$v" ]; then VAL=$v; else note_fail "$tag" "no result line" rstream rstream; fi
}

# rdmaperf TAG KEY IA ADDR API ARGS...: our two processes; KEY is the
# report key to take (MiBps, Gbps, lat_p50_us, lat_avg_us).
rdmaperf() {
	local tag=$1 key=$2 ia=$3 addr=$4 api=$5 v i
	shift 5
	# --wait and --spin say how blocked calls wait for completions: the
	# server's waits count as much as the client's, so both get them.
	local args=("$@") both=()
	for ((i = 0; i < ${#args[@]}; i++)); do
		case ${args[i]} in --wait | --spin) both+=("${args[i]}" "${args[i + 1]}") ;; esac
	done
	PORT=$((PORT + 1))
	pair "$tag" go -- "$BIN" -s --ia "$ia" --api "$api" --bind "$addr" --port "$PORT" "${both[@]}" -- \
		"$BIN" -c "$addr" --ia "$ia" --api "$api" --port "$PORT" "$@"
	VAL=FAIL
	[ "$RC" = 0 ] || return
	v=$(number "$(keyval "$key" "$CLI")")
	if [ -n "$v" ]; then VAL=$v; else note_fail "$tag" "no $key in the client's report" "$BIN" "$BIN"; fi
}

# median V...: the median, or FAIL if any value is FAIL.
median() {
	local v
	for v in "$@"; do [ "$v" = FAIL ] && {
		echo FAIL
		return
	}; done
	printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else printf "%.4g\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

# ---------------------------------------------------------------- rows
ROWS=()

# row ID "WORKLOAD" "BASELINE" UNIT TARGET -- BASE-CMD... -- OURS-CMD...
# Runs both commands REPS times, interleaved, and appends a table row.  TARGET is like ">=0.95" or "<=1.2" (a bound
# on ours/baseline) or "-" (informational).  The commands are the helper
# functions above without their TAG.
row() {
	local id=$1 work=$2 base=$3 unit=$4 target=$5 r
	shift 5
	[[ $id =~ $ONLY ]] || return 0
	[ "$1" = -- ] && shift
	local bcmd=()
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		bcmd+=("$1")
		shift
	done
	shift
	local ocmd=("$@") bv=() ov=()
	echo "bench: $id" >&2
	for ((r = 1; r <= REPS; r++)); do
		"${bcmd[0]}" "$id-$r-base" "${bcmd[@]:1}"
		bv+=("$VAL")
		"${ocmd[0]}" "$id-$r-ours" "${ocmd[@]:1}"
		ov+=("$VAL")
	done
	echo "$id: baseline ${bv[*]}; rdmanet ${ov[*]} ($unit)" >>"$RAW"
	local bm om ratio met
	bm=$(median "${bv[@]}")
	om=$(median "${ov[@]}")
	ratio=FAIL met=FAIL
	if [ "$bm" != FAIL ] && [ "$om" != FAIL ]; then
		ratio=$(awk -v o="$om" -v b="$bm" 'BEGIN { printf "%.2f", o / b }')
		case $target in
		-) met=info ;;
		*)
			met=$(awk -v r="$ratio" -v t="$target" 'BEGIN {
				op = substr(t, 1, 2); x = substr(t, 3) + 0
				ok = (op == ">=") ? (r >= x) : (r <= x)
				print ok ? "yes" : "**no**" }')
			;;
		esac
	fi
	local tshow=$target
	case $target in
	">="*) tshow="≥ ${target#>=}×" ;;
	"<="*) tshow="≤ ${target#<=}×" ;;
	-) tshow="—" ;;
	esac
	ROWS+=("| $work | $base | $(fmtv "$bm" "$unit") | $(fmtv "$om" "$unit") | $ratio× | $tshow | $met |")
}

# fmtv VALUE UNIT: VALUE with the precision its unit deserves, or FAIL.
fmtv() {
	case $1 in
	FAIL) echo FAIL ;;
	*) awk -v v="$1" -v u="$2" 'BEGIN { printf(u == "Gb/s" ? "%.3f %s\n" : "%.1f %s\n", v, u) }' ;;
	esac
}

# ------------------------------------------------------------ the rows
T0=$(date +%s)
echo "bench: rdmaperf $BIN; rxe0 $RXE, siw0 $SIW; $REPS runs per side" >&2

# Warm-up: every tool once, short; results are discarded (a failure is
# still reported under the table).
echo "bench: warm-up" >&2
perftest warm-ib_write_bw ib_write_bw 4 rxe0 "$RXE" -s 65536 -n 50
perftest warm-ib_send_lat ib_send_lat 5 rxe0 "$RXE" -s 64 -n 100
rstream_run warm-rstream lat "$RXE" -S 64 -C 1 -I 100
rdmaperf warm-rdmanet lat_p50_us "verbs:$RXE" "$RXE" rdmanet --test lat --size 64 --iters 100
rdmaperf warm-dat-siw MiBps "verbs:$SIW" "$SIW" dat --test bw --size 65536 --iters 50
rdmaperf warm-iwarp MiBps "iwarp:$SIW" "$SIW" dat --test bw --size 65536 --iters 50

# 1. rdmanet on rxe0 (verbs provider) against perftest on rxe0.
row rxe-bw-64k "rdmanet bw, 64 KiB writes, rxe0" "ib_write_bw -R -s 65536" MiB/s ">=0.95" \
	-- perftest ib_write_bw 4 rxe0 "$RXE" -s 65536 -n "$BW64_N" \
	-- rdmaperf MiBps "verbs:$RXE" "$RXE" rdmanet --test bw --size 65536 --iters "$BW64_N"
row rxe-bw-1m "rdmanet bw, 1 MiB writes, rxe0" "ib_write_bw -R -s 1048576" MiB/s ">=0.95" \
	-- perftest ib_write_bw 4 rxe0 "$RXE" -s 1048576 -n "$BW1M_N" \
	-- rdmaperf MiBps "verbs:$RXE" "$RXE" rdmanet --test bw --size 1048576 --iters "$BW1M_N"
row rxe-lat "rdmanet half RTT (median), 64 B, rxe0, default wait (spin, then sleep)" "ib_send_lat -R -s 64 (t_typical)" µs "<=2" \
	-- perftest ib_send_lat 5 rxe0 "$RXE" -s 64 -n "$LAT_N" \
	-- rdmaperf lat_p50_us "verbs:$RXE" "$RXE" rdmanet --test lat --size 64 --iters "$LAT_N"
row rxe-lat-busy "rdmanet half RTT (median), 64 B, rxe0, busy-poll" "ib_send_lat -R -s 64 (t_typical)" µs "<=1.3" \
	-- perftest ib_send_lat 5 rxe0 "$RXE" -s 64 -n "$LAT_N" \
	-- rdmaperf lat_p50_us "verbs:$RXE" "$RXE" rdmanet --test lat --size 64 --iters "$LAT_N" --wait busy

# 2. rdmanet against rstream (rsockets) on rxe0.  rstream's bandwidth test
# sends N transfers and receives them back; its latency test is a
# ping-pong; usec/xfer is the mean half round trip.
row rs-bw-64k "rdmanet bw, 64 KiB, sent and echoed, rxe0" "rstream -S 65536 -C $RS_BW_N (Gb/sec, both ways)" Gb/s ">=1.0" \
	-- rstream_run gbps:65536 "$RXE" -S 65536 -C "$RS_BW_N" \
	-- rdmaperf Gbps "verbs:$RXE" "$RXE" rdmanet --test bw --echo --size 65536 --iters "$RS_BW_N"
row rs-lat "rdmanet half RTT (mean), 64 B, rxe0" "rstream -S 64 -C 1 -I $LAT_N (usec/xfer)" µs "<=1.0" \
	-- rstream_run lat "$RXE" -S 64 -C 1 -I "$LAT_N" \
	-- rdmaperf lat_avg_us "verbs:$RXE" "$RXE" rdmanet --test lat --size 64 --iters "$LAT_N"

# 3. The pure-Go iwarp provider on siw0's address against the verbs
# provider on the kernel's siw0: the same DAT workload.
row siw-bw-64k "iwarp provider: DAT RDMA Write bw, 64 KiB" "verbs provider on siw0, same workload" MiB/s ">=1.0" \
	-- rdmaperf MiBps "verbs:$SIW" "$SIW" dat --test bw --size 65536 --iters "$BW64_N" \
	-- rdmaperf MiBps "iwarp:$SIW" "$SIW" dat --test bw --size 65536 --iters "$BW64_N"
row siw-bw-1m "iwarp provider: DAT RDMA Write bw, 1 MiB" "verbs provider on siw0, same workload" MiB/s ">=1.0" \
	-- rdmaperf MiBps "verbs:$SIW" "$SIW" dat --test bw --size 1048576 --iters "$BW1M_N" \
	-- rdmaperf MiBps "iwarp:$SIW" "$SIW" dat --test bw --size 1048576 --iters "$BW1M_N"
row siw-lat "iwarp provider: DAT Send/Recv half RTT (median), 64 B" "verbs provider on siw0, same workload" µs "<=1.0" \
	-- rdmaperf lat_p50_us "verbs:$SIW" "$SIW" dat --test lat --size 64 --iters "$LAT_N" \
	-- rdmaperf lat_p50_us "iwarp:$SIW" "$SIW" dat --test lat --size 64 --iters "$LAT_N"
row siw-perf-bw "iwarp provider: DAT RDMA Write bw, 64 KiB" "ib_write_bw -R on siw0" MiB/s "-" \
	-- perftest ib_write_bw 4 siw0 "$SIW" -s 65536 -n "$BW64_N" \
	-- rdmaperf MiBps "iwarp:$SIW" "$SIW" dat --test bw --size 65536 --iters "$BW64_N"
row siw-perf-lat "iwarp provider: DAT half RTT (median), 64 B" "ib_send_lat -R on siw0 (t_typical)" µs "-" \
	-- perftest ib_send_lat 5 siw0 "$SIW" -s 64 -n "$LAT_N" \
	-- rdmaperf lat_p50_us "iwarp:$SIW" "$SIW" dat --test lat --size 64 --iters "$LAT_N"

# Informational: where the rdmanet gap is.  The DAT level on the verbs
# provider (no rdmanet), the baselines in blocking/event mode (perftest
# and rstream busy-poll by default), and the Go runtime's own floor (the
# same ping-pong over kernel TCP).
row info-dat-bw "DAT RDMA Write bw (verbs provider), 64 KiB, rxe0" "ib_write_bw -R -s 65536" MiB/s "-" \
	-- perftest ib_write_bw 4 rxe0 "$RXE" -s 65536 -n "$BW64_N" \
	-- rdmaperf MiBps "verbs:$RXE" "$RXE" dat --test bw --size 65536 --iters "$BW64_N"
row dat-lat "DAT Send/Recv half RTT (median), 64 B, rxe0" "ib_send_lat -R -s 64 (t_typical)" µs "<=1.2" \
	-- perftest ib_send_lat 5 rxe0 "$RXE" -s 64 -n "$LAT_N" \
	-- rdmaperf lat_p50_us "verbs:$RXE" "$RXE" dat --test lat --size 64 --iters "$LAT_N"
row info-lat-event "rdmanet half RTT (median), 64 B, rxe0, event-only wait" "ib_send_lat -R -e (event mode, t_typical)" µs "-" \
	-- perftest ib_send_lat 5 rxe0 "$RXE" -e -s 64 -n "$LAT_N" \
	-- rdmaperf lat_p50_us "verbs:$RXE" "$RXE" rdmanet --test lat --size 64 --iters "$LAT_N" --wait event
# What RDMA Write with Immediate saves: the same stream with every
# announcement a control Send (--no-imm; the client's Hello then lacks
# the capability, so neither side uses it) and with the default.
for size in 65536 1048576; do
	n=$BW64_N
	[ "$size" = 1048576 ] && n=$BW1M_N
	row "info-imm-bw-$size" "rdmanet bw, $size-byte writes, rxe0, Write with Immediate" "rdmanet --no-imm (control Sends)" MiB/s "-" \
		-- rdmaperf MiBps "verbs:$RXE" "$RXE" rdmanet --test bw --size "$size" --iters "$n" --no-imm \
		-- rdmaperf MiBps "verbs:$RXE" "$RXE" rdmanet --test bw --size "$size" --iters "$n"
done
# The spin sweep behind the verbs provider's default spin (defaultSpin in
# dat/verbs): the same ping-pong with the waiter spinning that long
# before it sleeps on the completion channel.
for spin in 5us 20us 50us 200us 1ms; do
	row "info-spin-$spin" "rdmanet half RTT (median), 64 B, rxe0, spin $spin, then sleep" "ib_send_lat -R -s 64 (t_typical)" µs "-" \
		-- perftest ib_send_lat 5 rxe0 "$RXE" -s 64 -n "$LAT_N" \
		-- rdmaperf lat_p50_us "verbs:$RXE" "$RXE" rdmanet --test lat --size 64 --iters "$LAT_N" --wait adaptive --spin "$spin"
done
row info-rs-block "rdmanet half RTT (mean), 64 B, rxe0" "rstream -T b (blocking) -S 64 -C 1 -I $LAT_N" µs "-" \
	-- rstream_run lat "$RXE" -T b -S 64 -C 1 -I "$LAT_N" \
	-- rdmaperf lat_avg_us "verbs:$RXE" "$RXE" rdmanet --test lat --size 64 --iters "$LAT_N"
row info-go-tcp "Go net.Conn over kernel TCP, half RTT (mean), 64 B" "rstream -T s -T b (C, blocking TCP)" µs "-" \
	-- rstream_run lat "$SIW" -T s -T b -S 64 -C 1 -I "$LAT_N" \
	-- rdmaperf lat_avg_us "" "$SIW" tcp --test lat --size 64 --iters "$LAT_N"

T1=$(date +%s)

# --------------------------------------------------------------- report
{
	echo "| workload | baseline | baseline value | rdmanet value | ratio | target | met? |"
	echo "| --- | --- | --- | --- | --- | --- | --- |"
	printf '%s\n' "${ROWS[@]}"
	echo
	echo "ratio = rdmanet value / baseline value (for µs rows lower is better); medians of $REPS runs each,"
	echo "measured in one guest boot in $((T1 - T0)) s; kernel $(uname -r), $(nproc) vCPUs."
	echo
	echo "Runs:"
	sed 's/^/    /' "$RAW"
	if [ -s "$FAILS" ]; then
		echo
		echo "## Failed runs"
		cat "$FAILS"
	fi
} | tee "$TABLE"
# Exit status: 0 if every cell has a number (targets missed are not
# failures of the benchmark), 1 otherwise.
! grep -q '| FAIL' "$TABLE"
