#!/usr/bin/env bash
# The whole test suite: every module (the root and tests/), race detector on, short sizes.
# Long soaks, kill loops and benchmarks are run by hand (see docs/performance.md).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' | grep -v '\.pb\.go$') 2>/dev/null || true)
if [ -n "$unformatted" ]; then echo "gofmt needed:"; echo "$unformatted"; exit 1; fi

echo "== generated code is current"
if command -v protoc >/dev/null 2>&1; then
  scripts/gen-proto.sh --check
elif [ "${CI:-}" = true ]; then
  echo "protoc is missing: .ci/run installs protobuf-compiler"; exit 1
else
  echo "protoc not installed: skipping the check (apt-get install protobuf-compiler)"
fi

echo "== go vet"
go vet ./...
(cd tests && go vet ./...)
(cd bench && go vet ./...)

echo "== staticcheck (settings: staticcheck.conf)"
# Installed through the Go module proxy on first use; the version is pinned so findings do not change
# under the suite.
lint=${TOOLS:-${TMPDIR:-/tmp}/meridian-bench-tools}
[ -x "$lint/staticcheck" ] || GOBIN=$lint go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
"$lint/staticcheck" ./...
(cd tests && "$lint/staticcheck" ./...)
(cd bench && "$lint/staticcheck" ./...)

# Both modules always run, so one failure does not hide another; the script fails if either failed.
status=0
echo "== go test (root module)"
go test -race -short -count=1 -timeout 15m ./... || status=1

echo "== go test (tests module)"
(cd tests && go test -race -short -count=1 -timeout 15m ./...) || status=1

echo "== fuzz smoke (every fuzz target, new inputs for FUZZTIME each)"
scripts/fuzz-smoke.sh || status=1

if [ $status -ne 0 ]; then echo "FAIL: see the failures above"; fi
exit $status
