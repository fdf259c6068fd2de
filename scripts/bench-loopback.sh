#!/usr/bin/env bash
# Two-process loopback benchmarks: rdmanet and raw DAT (the pure-Go iwarp
# provider) against TCP, with cmd/rdmaperf as server and client processes,
# as users run them. Every round runs each workload on every API back to
# back (interleaved), so slow phases of the machine hit all of them alike.
#
#   scripts/bench-loopback.sh [ROUNDS]        (default 5; at least 3)
#
# Environment: BENCH_OUT (default /tmp/rdmanet-bench) keeps the raw
# report lines and the benchstat input; BENCH_APIS (default "tcp rdmanet
# dat") and BENCH_WORKLOADS (default "lat:64 bw:4096 bw:65536 bw:1048576")
# narrow the run. BENCH_BINS compares builds: space-separated
# label=path pairs of rdmaperf binaries (say, one built from main and one
# from a branch), each run on every workload and API in turn, so their
# figures come from the same phases of the machine; benchstat then
# compares them per API (-col /bin) and the ratios are printed per build.
#
# Output: benchstat's comparison of the APIs per workload (medians and
# their spread; benchstat -col /api), then the ratios to TCP. Latency
# figures are half round trips (p50 and minimum), bandwidth is MiB/s of
# payload, and cpu-s/GB is the user+system CPU both processes spent per
# 10^9 bytes moved (from their rusage).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-5}
out=${BENCH_OUT:-/tmp/rdmanet-bench}
apis=${BENCH_APIS:-"tcp rdmanet dat"}
workloads=${BENCH_WORKLOADS:-"lat:64 bw:4096 bw:65536 bw:1048576"}
mkdir -p "$out"
bin=$out/rdmaperf
go build -o "$bin" ./cmd/rdmaperf
bins=${BENCH_BINS:-"this=$bin"}

benchstat=(benchstat)
if ! command -v benchstat >/dev/null; then
	benchstat=(go run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da)
fi

port=$((20000 + RANDOM % 10000)) # below the ephemeral range (32768-)
raw=$out/raw.txt
bench=$out/bench.txt
: >"$raw"
: >"$bench"

# iters picks a count that takes about a second per run.
iters() {
	case $1 in
	lat:*) echo 20000 ;;
	bw:4096) echo 100000 ;;
	bw:65536) echo 20000 ;;
	bw:1048576) echo 2000 ;;
	*) echo 1000 ;;
	esac
}

# cpu_of prints the user+system seconds a finished process of ours used,
# from /usr/bin/time's output file.
run_one() { # api workload label binary
	local api=$1 test=${2%%:*} size=${2##*:} n label=$3 bin=$4
	n=$(iters "$2")
	port=$((port + 1))
	local ia=(--ia iwarp:127.0.0.1)
	[ "$api" = tcp ] && ia=()
	local stime=$out/server.time ctime=$out/client.time
	/usr/bin/time -f '%U %S' -o "$stime" "$bin" -s "${ia[@]}" --api "$api" --port "$port" >"$out/server.out" 2>"$out/server.err" &
	local spid=$!
	# The server's own line for this port: the previous server's file may
	# not be truncated yet when the loop first looks.
	for _ in $(seq 1000); do # up to 10 s on a busy machine
		grep -q "listening.*:$port\$" "$out/server.err" 2>/dev/null && break
		sleep 0.01
	done
	if ! /usr/bin/time -f '%U %S' -o "$ctime" "$bin" -c 127.0.0.1 "${ia[@]}" --api "$api" --port "$port" \
		--test "$test" --size "$size" --iters "$n" >"$out/client.out" 2>"$out/client.err"; then
		echo "bench-loopback: client failed: api=$api $2" >&2
		cat "$out/client.err" >&2
		kill "$spid" 2>/dev/null || true
		wait "$spid" 2>/dev/null || true
		return 1
	fi
	wait "$spid" || true
	local line cpu
	line=$(grep '^rdmaperf role=client' "$out/client.out")
	echo "$line" >>"$raw"
	cpu=$(cat "$stime" "$ctime" | awk '{s += $1 + $2} END {printf "%.4f", s}')
	# One benchstat line: BenchmarkTwoProcess/<test>/size=<n>/api=<api>.
	echo "$line" | awk -v api="$api" -v label="$label" -v test="$test" -v size="$size" -v n="$n" -v cpu="$cpu" '
	{
		for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
		name = sprintf("BenchmarkTwoProcess/%s/size=%s/api=%s", test, size, api)
		if (label != "") name = name "/bin=" label
		if (test == "lat")
			printf "%s %d %.0f p50-ns %.0f min-ns\n", name, n, v["lat_p50_us"] * 1000, v["lat_min_us"] * 1000
		else
			printf "%s %d %.2f MiB/s %.3f cpu-s/GB\n", name, n, v["MiBps"], cpu / (v["bytes"] / 1e9)
	}' >>"$bench"
}

for r in $(seq "$rounds"); do
	for w in $workloads; do
		for api in $apis; do
			for lb in $bins; do
				blabel=${lb%%=*}
				[ -z "${BENCH_BINS:-}" ] && blabel=
				run_one "$api" "$w" "$blabel" "${lb#*=}"
			done
		done
	done
	echo "bench-loopback: round $r of $rounds done" >&2
done

if [ -z "${BENCH_BINS:-}" ]; then
	"${benchstat[@]}" -col /api "$bench"
	exit
fi
# Builds against each other per API, then each build's APIs against TCP.
"${benchstat[@]}" -col /bin "$bench"
for lb in $bins; do
	echo
	echo "bench-loopback: build ${lb%%=*}"
	"${benchstat[@]}" -filter "/bin:${lb%%=*}" -col /api "$bench"
done
