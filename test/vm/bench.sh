#!/bin/bash
# bench.sh - the guest benchmarks: rdmanet and the pure-Go iwarp provider
# against perftest, rstream and the kernel's siw, measured in one guest
# boot and printed as one markdown table (see README.md, "Benchmarks").
#
#   sudo test/vm/bench.sh
#   sudo RDMANET_BENCH_ONLY='^rxe-' test/vm/bench.sh    # some rows only
#
# Builds cmd/rdmaperf with -tags verbs, boots one guest with run.sh (under
# flock on $RDMANET_VM_LOCK, default /tmp/rdmanet-vm.lock, so it waits for
# other users of the VM; do not wrap it in that flock yourself) and runs
# guest/bench.sh there.  The table goes to stdout; the logs of every run
# stay in $RDMANET_BENCH_OUT (default: a new directory under /tmp, named at
# the end).  Exit status: 0 if every cell has a number (a missed target is
# a result, not a failure), 1 if a run failed, 2 on a setup problem.
#
# Knobs (passed on to the guest): RDMANET_BENCH_REPS (3),
# RDMANET_BENCH_ONLY (regex on row ids), RDMANET_BENCH_RUN_TIMEOUT (90 s
# per process); RDMANET_VM_TIMEOUT (run.sh's watchdog; 1200 s here).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/../.." && pwd -P)

if [ "$(id -u)" != 0 ]; then
	echo "bench.sh: needs root (run.sh shares / over 9p)" >&2
	exit 2
fi
GO=$(command -v go || true)
[ -n "$GO" ] || GO=/usr/local/go/bin/go
if [ ! -x "$GO" ]; then
	echo "bench.sh: no go toolchain (PATH or /usr/local/go/bin)" >&2
	exit 2
fi

OUT=${RDMANET_BENCH_OUT:-$(mktemp -d /tmp/rdmanet-bench.XXXXXX)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd -P)
echo "bench.sh: building cmd/rdmaperf (-tags verbs)" >&2
# Never -race in the guest: strip it from GOFLAGS.
(cd "$REPO" && CGO_ENABLED=1 GOFLAGS="${GOFLAGS:+${GOFLAGS//-race/}}" "$GO" build -tags verbs -o "$OUT/rdmaperf" ./cmd/rdmaperf) || {
	echo "bench.sh: build failed" >&2
	exit 2
}
cp "$HERE/guest/bench.sh" "$OUT/guest-bench.sh"

echo "bench.sh: waiting for the VM lock, then one guest boot (about 4-7 minutes under TCG)" >&2
rc=0
# The guest's cwd is $OUT (run.sh shares the cwd read-write): its logs
# and table.md land there.
(cd "$OUT" && RDMANET_VM_TIMEOUT=${RDMANET_VM_TIMEOUT:-1200} \
	flock "${RDMANET_VM_LOCK:-/tmp/rdmanet-vm.lock}" \
	"$HERE/run.sh" bash "$OUT/guest-bench.sh" "$OUT/rdmaperf") || rc=$?
echo "bench.sh: logs in $OUT (table.md, logs/)" >&2
case $rc in
0) exit 0 ;;
1) exit 1 ;;
*)
	echo "bench.sh: the guest run failed (run.sh exit $rc)" >&2
	exit 1
	;;
esac
