#!/bin/bash
# suite.sh [GO PACKAGE PATTERN...] - the VM test suite (what .ci/run calls).
#
# Skips (one "SKIP ..." line, exit 0) only where it cannot run at all: not
# root, not x86_64, no apt-get, or no qemu and apt-get cannot install it.
# Otherwise:
#   1. setup.sh (packages, kernel, siw.ko, initramfs; cached, see README.md)
#   2. Go packages (args, else $RDMANET_VM_PKGS, else ./...; patterns are
#      relative to the module root): those with files behind the `verbs`
#      build tag and tests are built on the HOST with
#      `go test -c -tags verbs` (cgo, never -race), plus the harness's own
#      cgo self-test (testdata/verbsprobe)
#   3. one guest boot (run.sh) running guest/checks.sh: `rdma link` shows
#      rxe0 and siw0, `ibv_devices` lists both, rping -C 3 -v over rxe and
#      over siw, then each test binary, one at a time
# Prints one PASS/FAIL/SKIP line per check (a failure's output follows,
# indented) and, last, exactly "N passed, N failed" (", N skipped" if any).
# Exit status 0 iff nothing failed.
#
# Knobs: RDMANET_VM_PKGS="./dat/... ./rdmanet/..."  RDMANET_VM_ALLPKGS=1
#   (also packages without verbs-tagged files)  RDMANET_VM_SELFTEST=0
#   RDMANET_VM_PKG_TIMEOUT=300 (s, per test binary)
#   RDMANET_VM_SUITE_TIMEOUT=1800 (s, the whole guest run)
#   RDMANET_VM_VERBOSE_CHECKS=1 (print every check's output)
#   and run.sh's / setup.sh's knobs (RDMANET_VM_CACHE, ...).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/../.." && pwd -P)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

skip_suite() {
	echo "SKIP rdmanet VM suite: $*"
	exit 0
}

# --------------------------------------------------------- can it run?
[ "$(id -u)" = 0 ] || skip_suite "needs root (qemu 9p passthrough of /, apt-get, module build); not running as root"
[ "$(uname -m)" = x86_64 ] || skip_suite "needs an x86_64 host (the guest runs the host's userland); this is $(uname -m)"
command -v apt-get >/dev/null 2>&1 || skip_suite "needs Debian's apt-get (the guest kernel and rdma-core come from Debian)"
if ! command -v qemu-system-x86_64 >/dev/null 2>&1; then
	echo "INFO qemu-system-x86_64 not found; installing qemu-system-x86"
	export DEBIAN_FRONTEND=noninteractive
	apt_q=(apt-get -o DPkg::Lock::Timeout=600 -y -qq)
	{ "${apt_q[@]}" install --no-install-recommends qemu-system-x86 >/dev/null 2>&1 ||
		{ "${apt_q[@]}" update >/dev/null 2>&1 &&
			"${apt_q[@]}" install --no-install-recommends qemu-system-x86 >/dev/null 2>&1; }; } ||
		skip_suite "qemu-system-x86_64 is missing and apt-get cannot install qemu-system-x86"
	command -v qemu-system-x86_64 >/dev/null 2>&1 ||
		skip_suite "qemu-system-x86_64 is missing after installing qemu-system-x86"
fi

# ----------------------------------------------------------- bookkeeping
pass=0 fail=0 skipped=0
TMP=$(mktemp -d "${TMPDIR:-/tmp}/rdmanet-vm-suite.XXXXXX")
RUNPID=
cleanup() {
	# run.sh's TERM trap stops qemu and removes its control dir
	if [ -n "$RUNPID" ]; then kill "$RUNPID" 2>/dev/null || true; fi
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# report PASS|FAIL|SKIP NAME [WHY]
report() {
	echo "$1 $2${3:+ ($3)}"
	case $1 in
	PASS) pass=$((pass + 1)) ;;
	FAIL) fail=$((fail + 1)) ;;
	SKIP) skipped=$((skipped + 1)) ;;
	esac
}
indent() { sed 's/^/    | /'; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
summary() {
	local s="$pass passed, $fail failed"
	[ "$skipped" = 0 ] || s="$s, $skipped skipped"
	echo "$s"
	[ "$fail" = 0 ]
}
T_START=$(now)

# ------------------------------------------------------------- 1 setup
t0=$(now)
# (setup.sh writes its progress to stderr and nothing to stdout)
if "$HERE/setup.sh" 2>&1 | tee "$TMP/setup.log" >&2; then
	KVER=${RDMANET_VM_KVER:-$(cat "$(vm_cache_base)/current")}
	report PASS setup "$(secs "$t0" "$(now)")s, kernel $KVER"
else
	report FAIL setup "$(secs "$t0" "$(now)")s"
	tail -n 40 "$TMP/setup.log" | indent
	summary
	exit 1
fi
T_SETUP=$(secs "$t0" "$(now)")

# ----------------------------------------------------- 2 Go test binaries
t0=$(now)
PLAN=$TMP/plan
BIN=$TMP/bin
mkdir -p "$BIN"
: >"$PLAN"
GO=$(command -v go || true)
[ -n "$GO" ] || [ ! -x /usr/local/go/bin/go ] || GO=/usr/local/go/bin/go
# never -race in the guest; cgo is required
goflags=
for f in ${GOFLAGS:-}; do
	case $f in -race | -race=*) ;; *) goflags="${goflags:+$goflags }$f" ;; esac
done
# ia_kind DIR: how a package's tests choose their IA, which says how the
# guest runs them (guest/checks.sh): "ia" (RDMANET_TEST_IA names the IA,
# RDMANET_TEST_ADDR its address), "dat" (dat's harness: a registry entry
# plus RDMANET_TEST_PROVIDER and RDMANET_TEST_ADDR), or "-" (neither).
ia_kind() {
	if grep -qs -- RDMANET_TEST_IA "$1"/*_test.go; then
		echo ia
	elif grep -qs -- RDMANET_TEST_PROVIDER "$1"/*_test.go; then
		echo dat
	else
		echo -
	fi
}
gobuild() { (cd "$1" && shift && CGO_ENABLED=1 GOFLAGS=$goflags "$GO" test -c -tags verbs "$@"); }

if [ -z "$GO" ]; then
	report SKIP go-tests "no go toolchain on the host"
else
	if [ $# -gt 0 ]; then
		pkgs=("$@")
	else
		read -r -a pkgs <<<"${RDMANET_VM_PKGS-./...}"
	fi
	if [ "${#pkgs[@]}" -eq 0 ]; then
		echo "INFO go-tests: no Go packages given; nothing built"
	else
		# noprov drops the provider_verbs*.go files from a file list.
		noprov() { printf '%s\n' $1 | { grep -v '^provider_verbs.*\.go$' || true; } | tr '\n' ' '; }
		# fields separated by \x1f: with a whitespace IFS, empty fields
		# would collapse
		fmt='{{.ImportPath}}{{"\x1f"}}{{.Dir}}{{"\x1f"}}{{len .TestGoFiles}}:{{len .XTestGoFiles}}{{"\x1f"}}{{join .GoFiles " "}} {{join .CgoFiles " "}} {{join .TestGoFiles " "}} {{join .XTestGoFiles " "}}{{"\x1f"}}{{with .Error}}{{.Err}}{{end}}'
		if (cd "$REPO" && "$GO" list -e -tags verbs -f "$fmt" "${pkgs[@]}") >"$TMP/list.verbs" 2>"$TMP/list.err" &&
			(cd "$REPO" && "$GO" list -e -f "$fmt" "${pkgs[@]}") >"$TMP/list.plain" 2>>"$TMP/list.err"; then
			mod=$(cd "$REPO" && "$GO" list -m -f '{{.Path}}' 2>/dev/null) || mod=''
			n_all=0 n_tests=0 n_built=0
			while IFS=$'\x1f' read -r ip dir ntest files err; do
				[ -n "$ip" ] || continue
				n_all=$((n_all + 1))
				if [ -n "$err" ] && [ -z "$dir" ]; then
					report FAIL "go:$ip" "go list: $err"
					continue
				fi
				[ "$ntest" != 0:0 ] || continue # no tests with -tags verbs
				kind=$(ia_kind "$dir")
				plain=$(awk -F '\x1f' -v ip="$ip" '$1 == ip { print $4 }' "$TMP/list.plain")
				# A provider_verbs*.go file only makes the verbs provider
				# available to the program (package dat imports none): it
				# changes nothing unless the tests choose an IA.
				if [ "${RDMANET_VM_ALLPKGS:-0}" != 1 ] && [ "$(noprov "$plain")" = "$(noprov "$files")" ] && [ "$kind" = - ]; then
					continue # neither the verbs tag nor an IA choice changes anything here
				fi
				n_tests=$((n_tests + 1))
				name=go:${ip#"$mod"/}
				out=$BIN/$(printf '%s' "$ip" | tr -c 'A-Za-z0-9._-' '_').test
				if gobuild "$REPO" -o "$out" "$ip" >"$TMP/build.log" 2>&1 && [ -x "$out" ]; then
					printf '%s\t%s\t%s\t%s\n' "$name" "$dir" "$out" "$kind" >>"$PLAN"
					n_built=$((n_built + 1))
				else
					report FAIL "$name" "go test -c -tags verbs failed"
					tail -n 40 "$TMP/build.log" | indent
				fi
			done <"$TMP/list.verbs"
			if [ "$n_tests" = 0 ]; then
				echo "INFO go-tests: $n_all package(s) in '${pkgs[*]}', none has tests behind the verbs build tag; nothing built"
			else
				echo "INFO go-tests: built $n_built of $n_tests package(s) with verbs-tagged tests (of $n_all in '${pkgs[*]}')"
			fi
		else
			report FAIL go-list "go list ${pkgs[*]} failed"
			indent <"$TMP/list.err"
		fi
	fi
	if [ "${RDMANET_VM_SELFTEST:-1}" = 1 ]; then
		if GOWORK=off gobuild "$HERE/testdata/verbsprobe" -o "$BIN/selftest.test" . >"$TMP/build.log" 2>&1; then
			printf '%s\t%s\t%s\t-\n' go-selftest "$HERE/testdata/verbsprobe" "$BIN/selftest.test" >>"$PLAN"
		else
			report FAIL go-selftest "go test -c -tags verbs failed"
			tail -n 40 "$TMP/build.log" | indent
		fi
	fi
fi
T_BUILD=$(secs "$t0" "$(now)")

# -------------------------------------------------------------- 3 the VM
t0=$(now)
expected=(rdma-link ibv_devices rping-rxe rping-siw)
while IFS=$'\t' read -r name _ _ kind; do
	# mirror guest/checks.sh: which runs each binary gets
	[ "$kind" = ia ] || expected+=("$name")
	if [ "$kind" != - ] && [ "${RDMANET_VM_VERBS_IAS:-1}" = 1 ]; then
		expected+=("$name[verbs-rxe0]" "$name[verbs-siw0]")
	fi
done <"$PLAN"
declare -A seen=()
VM_TIMEOUT=${RDMANET_VM_SUITE_TIMEOUT:-1800}
cd "$REPO"
exec 3< <(RDMANET_VM_TIMEOUT=$VM_TIMEOUT "$HERE/run.sh" -- bash "$HERE/guest/checks.sh" "$PLAN" 2>"$TMP/run.err")
RUNPID=$!
while IFS= read -r line <&3; do
	case $line in
	"@@rdmanet-vm "*)
		read -r status name why <<<"${line#@@rdmanet-vm }"
		why=${why#(}
		report "$status" "$name" "${why%)}"
		seen[$name]=1
		;;
	*) printf '%s\n' "$line" ;;
	esac
done
exec 3<&-
vmrc=0
wait "$RUNPID" || vmrc=$?
RUNPID=
T_VM=$(secs "$t0" "$(now)")
case $vmrc in
0) why= ;;
124) why="VM timeout after ${VM_TIMEOUT}s" ;;
255) why="VM died" ;;
*) why="guest script rc $vmrc" ;;
esac
missing=0
for name in "${expected[@]}"; do
	if [ -z "${seen[$name]:-}" ]; then
		report FAIL "$name" "no result: ${why:-no result line}"
		missing=1
	fi
done
if [ "$missing" = 1 ] || [ "$vmrc" != 0 ]; then
	echo "INFO run.sh exited $vmrc; its stderr:"
	indent <"$TMP/run.err"
fi

echo "INFO times: setup ${T_SETUP}s, go build ${T_BUILD}s, vm ${T_VM}s, total $(secs "$T_START" "$(now)")s"
summary
