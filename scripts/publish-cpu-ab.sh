#!/usr/bin/env bash
# Broker CPU per published message, alternating broker binaries: each run starts a standalone
# broker on a fresh data directory, drives it with pulsar-perf (1 KiB, unthrottled, batched as
# perf_produce in scripts/bench-lib.sh) for DUR seconds, and divides the broker's CPU (from
# /proc/<pid>/stat, user and system) by the messages it counted (pulsar_in_messages_total).
# CPU per message is much less sensitive to other load on the machine than the rate. The client's
# CPU per message and the host's steal time over the run are printed too: broker + client CPU per
# message is what one published message costs the machine's two cores.
#
# usage: VERSIONS="/path/meridian-a /path/meridian-b" PAIRS=3 scripts/publish-cpu-ab.sh
# env:   RATE  messages per second the producer sends (default 0: unthrottled); at a fixed rate the
#              CPU per message shows the fixed costs per group commit that saturation hides
#        PERF  pulsar-client-go's perf tool (default: installed into TOOLS by scripts/bench-lib.sh)
#        DUR   seconds per run (default 20)
#        OUT   work directory (default /tmp/publish-cpu-ab)
set -euo pipefail
. "$(dirname "$0")/bench-lib.sh"
if [ -z "${PERF:-}" ]; then
  PERF=$TOOLS/perf
  [ -x "$PERF" ] || { mkdir -p "$TOOLS"; GOBIN=$TOOLS go install "github.com/apache/pulsar-client-go/perf@$PERF_VERSION"; }
fi
DUR=${DUR:-20}
OUT=${OUT:-/tmp/publish-cpu-ab}
mkdir -p "$OUT"
tick=$(getconf CLK_TCK)
m=
trap 'if [ -n "$m" ]; then kill $m 2>/dev/null || true; wait $m 2>/dev/null || true; fi' EXIT
for _ in $(seq "${PAIRS:-2}"); do
  for bin in ${VERSIONS:?set VERSIONS to broker binaries}; do
    rm -rf "$OUT/data"
    "$bin" standalone --data-dir "$OUT/data" --broker-addr 127.0.0.1:46650 --web-addr 127.0.0.1:48080 > "$OUT/broker.log" 2>&1 &
    m=$!
    for _ in $(seq 100); do curl -fs http://127.0.0.1:48080/admin/v2/brokers/ready >/dev/null 2>&1 && break; sleep 0.1; done
    read -r u0 s0 < <(awk '{print $14, $15}' /proc/$m/stat)
    steal0=$(awk '/^cpu /{print $9}' /proc/stat)
    "$PERF" produce "persistent://public/default/cpu-ab-$RANDOM" \
      --service-url pulsar://127.0.0.1:46650 --max-connections 1 --rate "${RATE:-0}" --size 1024 \
      --batching-time 1 --batching-num-messages 1000 --batching-max-size 128 --queue-size 1000 > "$OUT/perf.log" 2>&1 &
    p=$!
    sleep "$((DUR + 1))"
    # The client's CPU too: with the broker's, what the two cores give to one published message.
    read -r pu ps < <(awk '{print $14, $15}' /proc/$p/stat)
    read -r u1 s1 < <(awk '{print $14, $15}' /proc/$m/stat)
    steal1=$(awk '/^cpu /{print $9}' /proc/stat)
    msgs=$(curl -fs http://127.0.0.1:48080/metrics | awk '/^pulsar_in_messages_total/ {s += $2} END {print s + 0}')
    kill -9 $p 2>/dev/null || true; wait $p 2>/dev/null || true
    rates=$(grep 'Publish rate' "$OUT/perf.log" | sed 's/.*Publish rate: *//; s/ msg\/s.*//' | tr '\n' ' ' || true) # none before 10 s
    awk -v b="$(basename "$bin")" -v r="$rates" -v n="$msgs" -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v c=$((pu + ps)) -v st=$((steal1 - steal0)) -v d=$((DUR + 1)) -v t="$tick" 'BEGIN {
      if (n > 0) printf "%s: rates %s| %d msgs, broker CPU %.2f µs/msg (user %.2f, system %.2f), client %.2f µs/msg, steal %.0f%%\n", b, r, n, (u + s) * 1e6 / t / n, u * 1e6 / t / n, s * 1e6 / t / n, c * 1e6 / t / n, 100 * st / t / d / 2
      else printf "%s: no messages counted\n", b }'
    kill $m; wait $m 2>/dev/null || true; m=
  done
done
