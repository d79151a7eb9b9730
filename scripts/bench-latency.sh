#!/usr/bin/env bash
# Publish latency at a fixed rate (issue 3 budget: p99 <= 5 ms at 5,000 msg/s, 1 KiB), measured two ways
# on a fresh broker per case: tests/cmd/publat (pulsar-perf's producer loop, exact percentiles) and
# pulsar-perf itself, whose "99%" is its 10 s window's maximum (docs/publish-latency.md).
# Loopback only; every process started here is stopped; every run is bounded in time.
#
# usage: scripts/bench-latency.sh            (results in $OUT, default /tmp/bench-latency)
# env:   TOOLS  where the tools are built or installed (scripts/bench-lib.sh)
#        DUR    seconds per run (default 30)
#        RATE   messages per second (default 5000); SIZE payload bytes (default 1024)
#        CASES  space-separated subset of: np interval always (default all three)
set -euo pipefail
. "$(dirname "$0")/bench-lib.sh"
root=$repo
OUT=${OUT:-/tmp/bench-latency}
DUR=${DUR:-30}
RATE=${RATE:-5000}
SIZE=${SIZE:-1024}
CASES=${CASES:-np interval always}
mkdir -p "$OUT"
bench_tools
BIN=$TOOLS
(cd "$root/tests" && go build -o "$BIN/publat" ./cmd/publat && go build -o "$BIN/machinelat" ./cmd/machinelat)

mpid=
stop_broker() {
  if [ -n "$mpid" ]; then kill "$mpid" 2>/dev/null || true; wait "$mpid" 2>/dev/null || true; mpid=; fi
}
trap stop_broker EXIT
start_broker() { # fsync mode
  stop_broker
  rm -rf "$OUT/data"
  "$BIN/meridian" standalone --data-dir "$OUT/data" --broker-addr 127.0.0.1:46651 --web-addr 127.0.0.1:48081 \
    --fsync "$1" > "$OUT/meridian-$1.log" 2>&1 &
  mpid=$!
  for _ in $(seq 100); do curl -fs http://127.0.0.1:48081/admin/v2/brokers/ready >/dev/null 2>&1 && break; sleep 0.1; done
}

# storage_latency prints the broker's own fsync and group-commit latency over the run so far (its
# histograms' buckets: "p99 <= 5 ms" means the bucket holding the 99th percentile ends at 5 ms), so a
# publish tail can be told apart from the disk's tail in the same run.
storage_latency() {
  curl -fs http://127.0.0.1:48081/metrics | awk '
    /^meridian_storage_(sync|commit)_seconds_bucket/ {
      name = $1; sub(/_bucket.*/, "", name); le = $1; sub(/.*le="/, "", le); sub(/".*/, "", le)
      n[name]++; bound[name, n[name]] = le; cum[name, n[name]] = $2 }
    /^meridian_storage_(sync|commit)_seconds_count/ { name = $1; sub(/_count$/, "", name); total[name] = $2 }
    END {
      for (name in total) {
        line = sprintf("%s: n=%d", name, total[name])
        split("0.5 0.9 0.99 0.999", qs, " ")
        for (k = 1; k <= 4; k++) {
          for (i = 1; i <= n[name]; i++) if (cum[name, i] >= qs[k] * total[name]) break
          b = bound[name, i]; if (b != "+Inf") b = sprintf("%g ms", b * 1000)
          line = line sprintf("  p%g <= %s", qs[k] * 100, b)
        }
        print "    storage " line
      }
    }' || true
}

echo "# $(date -u +%FT%TZ) $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg); $RATE msg/s x $SIZE B, $DUR s per run"
echo "## this machine's floors (tests/cmd/machinelat, ${FLOOR_DUR:-10} s each, nothing else running)"
"$BIN/machinelat" --duration "${FLOOR_DUR:-10}s" --dir "$OUT" | sed 's/^/    /'
for c in $CASES; do
  case "$c" in
    np) fsync=interval topic=non-persistent://public/default/lat-np ;;
    interval) fsync=interval topic=persistent://public/default/lat-interval ;;
    always) fsync=always topic=persistent://public/default/lat-always ;;
    *) echo "unknown case $c" >&2; exit 2 ;;
  esac
  echo "## $c: $topic, --fsync $fsync"
  start_broker "$fsync"
  echo "### publat (load $(cut -d' ' -f1 /proc/loadavg))"
  timeout -s KILL "$((DUR + 30))s" "$BIN/publat" --service-url pulsar://127.0.0.1:46651 --topic "$topic" \
    --rate "$RATE" --size "$SIZE" --duration "${DUR}s" --episodes 5 > "$OUT/publat-$c.log" 2>&1 || true
  grep -E 'window|start -> receipt|^  [0-9]|client GC' "$OUT/publat-$c.log" || true
  storage_latency
  start_broker "$fsync" # fresh again: the second client does not inherit the first one's log
  echo "### pulsar-perf (its 99% is the window max; load $(cut -d' ' -f1 /proc/loadavg))"
  run_for "$DUR" "$OUT/perf-$c.log" perf_produce pulsar://127.0.0.1:46651 "$topic" "$RATE" "$SIZE"
  grep -o 'Latency.*' "$OUT/perf-$c.log" | sed 's/\\[nt]//g; s/"$//' || true
done
stop_broker
