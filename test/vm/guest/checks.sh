#!/bin/bash
# checks.sh [PLAN] - the VM suite's guest side; suite.sh runs it with run.sh.
#
# Smoke checks (rdma link, ibv_devices, rping over rxe0 and siw0), then the
# Go test binaries listed in PLAN, one at a time.  PLAN has one line per
# binary, tab-separated: NAME  DIR  BINARY  KIND (run in DIR, as `go test`
# would; KIND: see on_verbs below).
# Each check prints one result line, "@@rdmanet-vm PASS|FAIL NAME [(why)]";
# a failed check's output follows, indented with "    | ".  With
# RDMANET_VM_VERBOSE_CHECKS=1 every check's output is printed.
set -uo pipefail

PLAN=${1:-}
RXE=${RDMA_RXE_ADDR:?not in the RDMA VM}
SIW=${RDMA_SIW_ADDR:?not in the RDMA VM}
PKG_TIMEOUT=${RDMANET_VM_PKG_TIMEOUT:-300}
VERBOSE=${RDMANET_VM_VERBOSE_CHECKS:-0}
LOGS=$(mktemp -d /tmp/checks.XXXXXX)
trap 'rm -rf "$LOGS"' EXIT

# result NAME RC LOG [WHY]
result() {
	local name=$1 rc=$2 log=$3 why=${4:-}
	if [ "$rc" = 0 ]; then
		echo "@@rdmanet-vm PASS $name${why:+ ($why)}"
	else
		echo "@@rdmanet-vm FAIL $name (${why:-rc $rc})"
	fi
	if [ "$rc" != 0 ] && grep -aq -- '--- FAIL' "$log"; then
		# A Go test log: the failing tests' own lines say what broke.
		echo "    | failing tests:"
		grep -a -B15 -A25 -- '--- FAIL' "$log" | head -n 300 | sed 's/^/    | /'
	fi
	if [ "$rc" != 0 ] || [ "$VERBOSE" = 1 ]; then
		if [ "$(wc -l <"$log")" -gt 150 ]; then
			echo "    | ... (last 150 of $(wc -l <"$log") lines)"
		fi
		tail -n 150 "$log" | sed 's/^/    | /'
	fi
}

# ------------------------------------------------------------ rdma link
log=$LOGS/rdma-link
{
	rdma link show
	ip -br addr show
} >"$log" 2>&1
rc=0 why=
for d in rxe0 siw0; do
	if ! grep -Eq "^link $d/1 state ACTIVE" "$log"; then
		rc=1
		why="${why:+$why; }$d missing or not ACTIVE"
	fi
done
result rdma-link "$rc" "$log" "$why"

# ---------------------------------------------------------- ibv_devices
log=$LOGS/ibv_devices
ibv_devices >"$log" 2>&1
rc=$? why=
for d in rxe0 siw0; do
	if ! awk '{ print $1 }' "$log" | grep -qx "$d"; then
		rc=1
		why="${why:+$why; }$d not listed"
	fi
done
result ibv_devices "$rc" "$log" "$why"

# ---------------------------------------------------------------- rping
# listening ADDR PORT: an rdma_cm listener is up (rdma res cm_id shows it for
# rxe and siw; for siw the kernel TCP socket is also in `ss -ltn`)
listening() {
	rdma res show cm_id 2>/dev/null | grep -q "state LISTEN .*src-addr $1:$2 " && return 0
	ss -Hltn "sport = :$2" 2>/dev/null | grep -q "$1:$2"
}

# rping_pair NAME ADDR PORT: server, wait until it listens, client, -C 3 -v
rping_pair() {
	local name=$1 addr=$2 port=$3 log=$LOGS/$1 spid rc=0 why='' i
	: >"$log"
	timeout 60 rping -s -a "$addr" -p "$port" -C 3 -v >"$log.srv" 2>&1 &
	spid=$!
	for ((i = 0; i < 150; i++)); do
		listening "$addr" "$port" && break
		kill -0 "$spid" 2>/dev/null || break
		sleep 0.2
	done
	if listening "$addr" "$port"; then
		echo "server listening on $addr:$port after ${i} polls" >>"$log"
		timeout 60 rping -c -a "$addr" -p "$port" -C 3 -v >"$log.cli" 2>&1 || {
			rc=$?
			why="client rc $rc"
		}
	else
		rc=1
		why="server never listened on $addr:$port"
		kill "$spid" 2>/dev/null
	fi
	local src=0
	wait "$spid" || src=$?
	if [ "$rc" = 0 ] && [ "$src" != 0 ]; then
		rc=$src
		why="server rc $src"
	fi
	local n
	n=$(grep -c 'ping data:' "$log.cli" 2>/dev/null)
	if [ "$rc" = 0 ] && [ "${n:-0}" -ne 3 ]; then
		rc=1
		why="client printed ${n:-0} pings, want 3"
	fi
	{
		echo "--- server: rping -s -a $addr -p $port -C 3 -v (rc $src)"
		cat "$log.srv"
		echo "--- client: rping -c -a $addr -p $port -C 3 -v"
		cat "$log.cli" 2>/dev/null
	} >>"$log"
	result "$name" "$rc" "$log" "$why"
}
rping_pair rping-rxe "$RXE" 7471
rping_pair rping-siw "$SIW" 7472

# ---------------------------------------------------- Go test binaries
# one package at a time (go test -p 1), in its source directory, no -race.
# run_go NAME DIR BINARY [VAR=VALUE...] runs one binary with extra env.
run_go() {
	local name=$1 dir=$2 bin=$3 log t0 t1 rc why
	shift 3
	log=$LOGS/go.$RANDOM
	t0=$(date +%s)
	rc=0
	(cd "$dir" && exec env "$@" timeout -k 10 $((PKG_TIMEOUT + 30)) "$bin" -test.v \
		-test.timeout "${PKG_TIMEOUT}s") </dev/null >"$log" 2>&1 || rc=$?
	t1=$(date +%s)
	if [ "$rc" = 0 ]; then
		why="$(grep -c '^--- PASS' "$log") tests passed, $(grep -c '^--- SKIP' "$log") skipped, $((t1 - t0))s"
	elif [ "$rc" = 124 ] || grep -q '^panic: test timed out' "$log"; then
		why="timed out after ${PKG_TIMEOUT}s"
	else
		why="rc $rc, $(grep -c '^--- FAIL' "$log") tests failed"
	fi
	result "$name" "$rc" "$log" "$why"
}

# Test suites parametrized by IA run on the verbs provider over the
# kernel's rxe0 and siw0. PLAN's KIND column says how a binary takes its IA:
#   dat  dat's harness: a registry whose "lo" entry opens the device, plus
#        RDMANET_TEST_PROVIDER and RDMANET_TEST_ADDR; it also runs as is
#        (the pure-Go iwarp provider on 127.0.0.1)
#   ia   RDMANET_TEST_IA names the IA and RDMANET_TEST_ADDR its address;
#        only the verbs runs here (the host's -race run covers iwarp)
#   -    runs as is
# RDMANET_VM_VERBS_IAS=0 leaves out the verbs runs.
on_verbs() {
	local name=$1 dir=$2 bin=$3 kind=$4 dev=$5 addr=$6 conf
	case $kind in
	dat)
		conf=$LOGS/dat-$dev.conf
		printf 'lo u2.0 threadsafe default verbs 1.0 "%s" ""\n' "$addr" >"$conf"
		run_go "${name}[verbs-$dev]" "$dir" "$bin" RDMANET_DAT_CONF="$conf" \
			RDMANET_TEST_ADDR="$addr" RDMANET_TEST_PROVIDER=verbs
		;;
	ia)
		run_go "${name}[verbs-$dev]" "$dir" "$bin" RDMANET_TEST_IA="verbs:$addr" \
			RDMANET_TEST_ADDR="$addr"
		;;
	esac
}

if [ -n "$PLAN" ] && [ -s "$PLAN" ]; then
	while IFS=$'\t' read -r name dir bin kind; do
		[ -n "$name" ] || continue
		kind=${kind:--}
		[ "$kind" = ia ] || run_go "$name" "$dir" "$bin"
		[ "$kind" != - ] && [ "${RDMANET_VM_VERBS_IAS:-1}" = 1 ] || continue
		on_verbs "$name" "$dir" "$bin" "$kind" rxe0 "$RXE"
		on_verbs "$name" "$dir" "$bin" "$kind" siw0 "$SIW"
	done <"$PLAN"
fi
exit 0
