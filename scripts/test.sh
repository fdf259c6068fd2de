#!/usr/bin/env bash
# The project's test command (README "Test"), also what CI runs.
#
#   scripts/test.sh            formatting, vet, unit and integration tests
#   RDMANET_VM=1 scripts/test.sh   ... plus the QEMU rxe/siw suite (root)
#
# -race needs cgo and a C compiler; without one the tests still run, and the
# script says so.
set -euo pipefail
cd "$(dirname "$0")/.."

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	printf 'gofmt: these files need formatting:\n%s\n' "$unformatted" >&2
	exit 1
fi
go vet ./...

race=-race
if ! CGO_ENABLED=1 go env CC >/dev/null 2>&1 || ! command -v "$(go env CC)" >/dev/null 2>&1; then
	echo "test.sh: no C compiler, running without -race" >&2
	race=
fi
go test $race -timeout 15m ./...

# The verbs provider's device-free tests (completion pairing, reordering)
# run on the host too, where rdma-core's headers are installed; its device
# tests skip here and run in the VM suite below.
if [ -f /usr/include/infiniband/verbs.h ] && [ -f /usr/include/rdma/rdma_cma.h ] && [ -n "$race" ]; then
	go vet -tags verbs ./...
	go test $race -tags verbs -timeout 5m ./dat/verbs/ ./test/interop/
fi

if [ "${RDMANET_VM:-0}" = 1 ]; then
	bash test/vm/suite.sh
	# rping against rdma-core's rping over the kernel's siw and rxe.
	bash test/vm/rping-interop.sh
fi
