#!/usr/bin/env bash
# The project's test command (README "Test"), also what CI runs.
#
#   scripts/test.sh            formatting, vet, unit and integration tests
#   RDMANET_VM=1 scripts/test.sh   ... plus the QEMU rxe/siw suite (root)
#
# -race needs cgo and a C compiler; without one the tests still run, and the
# script says so.
#
# The last line is always "N passed, N failed": Go test packages (the ok and
# FAIL lines of every go test run below) plus, with RDMANET_VM=1, the VM
# scripts' own check counts. A failing step that is neither (gofmt, vet, a
# VM setup error) counts as one failure, so the exit status is 0 exactly
# when "0 failed".
set -euo pipefail
cd "$(dirname "$0")/.."

gotest_log=$(mktemp)
vm_log=$(mktemp)
summary() {
	local status=$? passed failed p f
	passed=$(grep -cE '^ok[[:space:]]' "$gotest_log" || true)
	failed=$(grep -cE '^FAIL[[:space:]]' "$gotest_log" || true)
	while read -r p _ f _; do
		passed=$((passed + p))
		failed=$((failed + f))
	done < <(grep -E '^[0-9]+ passed, [0-9]+ failed' "$vm_log" || true)
	if [ "$status" != 0 ] && [ "$failed" = 0 ]; then
		failed=1
	fi
	rm -f "$gotest_log" "$vm_log"
	echo "$passed passed, $failed failed"
	exit "$status"
}
trap summary EXIT

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	printf 'gofmt: these files need formatting:\n%s\n' "$unformatted" >&2
	exit 1
fi
go vet ./...
# The pure-Go parts build on systems other than Linux too (the iwarp
# provider runs anywhere Go does); tests and the verbs provider are Linux's.
for goos in darwin freebsd windows; do
	GOOS=$goos go build ./...
done

race=-race
if ! CGO_ENABLED=1 go env CC >/dev/null 2>&1 || ! command -v "$(go env CC)" >/dev/null 2>&1; then
	echo "test.sh: no C compiler, running without -race" >&2
	race=
fi
go test $race -timeout 15m ./... 2>&1 | tee -a "$gotest_log"

# gRPC over rdmanet: grpc-go's interop client cases against its interop
# server. A module of its own, so that the main module does not depend on
# gRPC; ./... above does not reach into it.
(cd test/grpc && go vet ./... && go test $race -timeout 5m ./...) 2>&1 | tee -a "$gotest_log"

# The verbs provider's device-free tests (completion pairing, reordering)
# run on the host too, where rdma-core's headers are installed; its device
# tests skip here and run in the VM suite below.
if [ -f /usr/include/infiniband/verbs.h ] && [ -f /usr/include/rdma/rdma_cma.h ] && [ -n "$race" ]; then
	go vet -tags verbs ./...
	go test $race -tags verbs -timeout 5m ./dat/verbs/ ./test/interop/ 2>&1 | tee -a "$gotest_log"
else
	echo "test.sh: no rdma-core headers (or no -race): the verbs provider's tests run in the VM suite only" >&2
fi

if [ "${RDMANET_VM:-0}" = 1 ]; then
	bash test/vm/suite.sh | tee -a "$vm_log"
	# rping against rdma-core's rping over the kernel's siw and rxe.
	bash test/vm/rping-interop.sh | tee -a "$vm_log"
fi
