#!/usr/bin/env bash
# Known vulnerabilities in the code paths Meridian uses (govulncheck), for every module of the repository.
# Run by hand, not by scripts/test.sh: govulncheck needs its database at vuln.go.dev, which CI cannot
# reach. When the database is unreachable the script says so and exits 0 without judging.
#
# usage: scripts/vulncheck.sh          (env: TOOLS, where govulncheck is installed; see bench-lib.sh)
set -uo pipefail
cd "$(dirname "$0")/.."
TOOLS=${TOOLS:-${TMPDIR:-/tmp}/meridian-bench-tools}
mkdir -p "$TOOLS"
[ -x "$TOOLS/govulncheck" ] || GOBIN=$TOOLS go install golang.org/x/vuln/cmd/govulncheck@v1.9.0 || exit 2
if ! curl -fsS --max-time 10 -o /dev/null https://vuln.go.dev/index/db.json 2>/dev/null; then
  echo "vulncheck: the vulnerability database (vuln.go.dev) is not reachable from here; nothing checked"
  exit 0
fi
status=0
for m in . tests bench; do
  echo "== govulncheck ($m)"
  (cd "$m" && "$TOOLS/govulncheck" ./...) || status=1
done
exit $status
