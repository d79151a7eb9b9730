#!/usr/bin/env bash
# Fuzz smoke: every fuzz target of the root module fuzzed briefly with new inputs (FUZZTIME each,
# default 2s), beyond the committed corpus that `go test` replays anyway. Long runs are by hand:
#   FUZZTIME=60s scripts/fuzz-smoke.sh
# A crasher is written to the package's testdata/fuzz/<Target>/ by go test and fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-2s}
status=0
while IFS=: read -r file name; do
  pkg=./$(dirname "$file")
  echo "-- $pkg $name ($fuzztime)"
  if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg" >/tmp/fuzz-smoke.$$.log 2>&1; then
    cat /tmp/fuzz-smoke.$$.log; status=1
  fi
done < <(grep -rHo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*' . | sed 's/^\.\///; s/func //' | sort)
rm -f /tmp/fuzz-smoke.$$.log
exit $status
