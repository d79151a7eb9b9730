#!/usr/bin/env bash
# Run the Pulsar Go client's own integration tests (github.com/apache/pulsar-client-go v0.19.0,
# packages ./pulsar and ./pulsaradmin/pkg/admin) against `meridian standalone`, the way the client's CI
# runs them against Pulsar standalone: broker on localhost:6650, admin on localhost:8080, cluster
# "standalone", --max-message-size 1048576. One test per process; results per test and per area.
# Takes 30-60 minutes; run by hand (not in CI). Results go to docs/compatibility.md.
#
# usage: scripts/client-suite.sh [--secured] [client-suite flags...]
#   e.g. scripts/client-suite.sh -run 'TestProducer' -timeout 2m
#        scripts/client-suite.sh -list          (print the selection only)
#        scripts/client-suite.sh --secured -all (every test file, broker secured as below)
#
# --secured (or SECURED=1) starts the broker exactly as the client's CI starts Pulsar: the client's
# integration-tests/conf/standalone.conf given to `meridian standalone --config`, with /pulsar/certs
# and /pulsar/tokens pointed at the client's integration-tests/certs and integration-tests/tokens and
# basicAuthConf at its integration-tests/conf/.htpasswd (TLS on 6651 and 8443, token, TLS and basic
# authentication, authorization, anonymousUserRole=anonymous, listeners on 0.0.0.0), then makes the
# grants of the client's scripts/pulsar-test-service-start.sh with meridianctl as superuser "admin".
# Tests needing TLS or authentication are then in scope.
# env:   OUT=dir        results directory (default: $TMPDIR/meridian-client-suite-<time>)
#        KEEP=1         keep the client copy and the broker's data dir afterwards
#        MERIDIAN_BIN   use this broker binary instead of building cmd/meridian
#        RACE=1         build the client's test binaries with -race (the client's CI does; slower)
#        JOBS=n         tests run concurrently against the one broker (default 1)
#        TIMEOUT=dur    per-test timeout (default 3m)
#        SECURED=1      as --secured
#        BROKERS=n      run the suite against a cluster of n brokers in one process (--brokers n: broker
#                       i on 127.0.0.i, localhost:6650 and :8080 being broker 1; docs/cluster.md)
# Needs ports 6650 and 8080 (and with --secured 6651 and 8443) on 127.0.0.1 free; refuses to start
# otherwise.
set -euo pipefail
SECURED=${SECURED:-0}
BROKERS=${BROKERS:-1}
if [ "${1:-}" = "--secured" ]; then SECURED=1; shift; fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TMP=${TMPDIR:-/tmp}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=${OUT:-$TMP/meridian-client-suite-$STAMP}
WORK=$(mktemp -d "$TMP/meridian-client-suite-work.XXXXXX")
mkdir -p "$OUT"
BROKER_PID=

cleanup() {
  if [ -n "$BROKER_PID" ] && kill -0 "$BROKER_PID" 2>/dev/null; then
    kill -TERM "$BROKER_PID" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$BROKER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$BROKER_PID" 2>/dev/null || true
    wait "$BROKER_PID" 2>/dev/null || true
  fi
  if [ "${KEEP:-0}" != 1 ]; then chmod -R u+w "$WORK" 2>/dev/null || true; rm -rf "$WORK"; fi
}
trap cleanup EXIT INT TERM

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
PORTS="6650 8080"
[ "$SECURED" = 1 ] && PORTS="6650 6651 8080 8443"
for p in $PORTS; do
  if port_busy "$p"; then echo "port $p on 127.0.0.1 is in use; stop what listens there first" >&2; exit 1; fi
done

echo "== client source (module cache, copied writable)"
SRC_DIR=$(cd "$ROOT/tests" && go mod download -json github.com/apache/pulsar-client-go@v0.19.0 | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$SRC_DIR" ] || { echo "cannot find pulsar-client-go v0.19.0 in the module cache" >&2; exit 1; }
cp -r "$SRC_DIR" "$WORK/pcg"
chmod -R u+w "$WORK/pcg"

echo "== broker"
BIN=${MERIDIAN_BIN:-}
if [ -z "$BIN" ]; then
  BIN="$WORK/meridian"
  (cd "$ROOT" && go build -o "$BIN" ./cmd/meridian)
fi
if [ "$SECURED" = 1 ]; then
  # The client CI's broker configuration, its /pulsar paths pointed at the client's files. Pulsar's
  # CI gives the basic provider its htpasswd file as a system property; here it is one more key.
  IT="$WORK/pcg/integration-tests"
  sed -e "s#/pulsar/certs#$IT/certs#g" -e "s#/pulsar/tokens#$IT/tokens#g" "$IT/conf/standalone.conf" >"$WORK/standalone.conf"
  echo "basicAuthConf=$IT/conf/.htpasswd" >>"$WORK/standalone.conf"
  cp "$WORK/standalone.conf" "$OUT/standalone.conf"
  "$BIN" standalone --config "$WORK/standalone.conf" --data-dir "$WORK/data" >"$OUT/broker.log" 2>&1 &
else
  "$BIN" standalone --data-dir "$WORK/data" --broker-addr 127.0.0.1:6650 --web-addr 127.0.0.1:8080 \
    --max-message-size 1048576 --brokers "$BROKERS" >"$OUT/broker.log" 2>&1 &
fi
BROKER_PID=$!
for _ in $(seq 1 300); do
  if curl -fsS -o /dev/null http://127.0.0.1:8080/admin/v2/brokers/ready 2>/dev/null; then break; fi
  kill -0 "$BROKER_PID" 2>/dev/null || { echo "broker exited; see $OUT/broker.log" >&2; tail -20 "$OUT/broker.log" >&2; exit 1; }
  sleep 0.1
done
curl -fsS -o /dev/null http://127.0.0.1:8080/admin/v2/brokers/ready || { echo "broker not ready in 30s" >&2; exit 1; }
if [ "$BROKERS" -gt 1 ]; then
  # Every broker of the cluster registered (broker i on 127.0.0.i), so bundles spread over all.
  for _ in $(seq 1 300); do
    [ "$(curl -fsS http://127.0.0.1:8080/admin/v2/brokers/standalone | tr ',' '\n' | grep -c :)" = "$BROKERS" ] && break
    sleep 0.1
  done
fi

echo "== state the suite expects (scripts/pulsar-test-service-start.sh of the client)"
if [ "$SECURED" = 1 ]; then
  # The client CI's grants, made as superuser "admin" (integration-tests/tokens/admin-token).
  # pulsar-admin's `tenants create` without --allowed-clusters allows every cluster: here, the one.
  CTL=${MERIDIANCTL_BIN:-}
  if [ -z "$CTL" ]; then
    CTL="$WORK/meridianctl"
    (cd "$ROOT" && go build -o "$CTL" ./cmd/meridianctl)
  fi
  ctl() { "$CTL" --admin-url http://127.0.0.1:8080 --auth-token-file "$IT/tokens/admin-token" "$@"; }
  ctl tenants update public -r anonymous
  ctl namespaces grant-permission public/default --actions produce,consume --role anonymous
  ctl tenants create private -c standalone
  ctl namespaces create private/auth
  ctl namespaces grant-permission private/auth --actions produce,consume --role token-principal
else
  # public/default exists from the broker's bootstrap. The client's CI also creates tenant "private"
  # with namespace "private/auth" (used only by authentication tests, which are out of scope here).
  curl -fsS -o /dev/null -X PUT -H 'Content-Type: application/json' \
    -d '{"allowedClusters":["standalone"],"adminRoles":[]}' http://127.0.0.1:8080/admin/v2/tenants/private || echo "(tenant private: not created)"
  curl -fsS -o /dev/null -X PUT http://127.0.0.1:8080/admin/v2/namespaces/private/auth || echo "(namespace private/auth: not created)"
fi

echo "== tests (results in $OUT)"
args=(-src "$WORK/pcg" -out "$OUT" -jobs "${JOBS:-1}" -timeout "${TIMEOUT:-3m}")
[ "${RACE:-0}" = 1 ] && args+=(-race)
[ "$SECURED" = 1 ] && args+=(-secured)
(cd "$ROOT/tests" && go run ./cmd/client-suite "${args[@]}" "$@")
if ! kill -0 "$BROKER_PID" 2>/dev/null; then
  echo "WARNING: the broker exited during the run; see $OUT/broker.log" >&2
fi
if grep -qE '^(panic:|fatal error:)' "$OUT/broker.log"; then
  echo "WARNING: the broker log shows a panic; see $OUT/broker.log" >&2
fi
echo "results: $OUT/summary.md, $OUT/results.tsv, logs in $OUT/logs"
