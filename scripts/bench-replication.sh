#!/usr/bin/env bash
# Issue 6 replication benchmarks, side by side with NATS JetStream mirrors in the same run:
#   1. catch-up of 1,000,000 x 1 KiB into a second cluster (budget: >= 2x NATS mirror catch-up)
#   2. producer-on-A to consumer-on-B latency at 5,000 msg/s (budget: p50 <= 2 ms, p99 <= 10 ms)
# Both Meridian clusters fsync before acknowledging (the default). NATS runs with its default
# (no fsync before acknowledging, the fastest peer; with SYNC=always it publishes only ~3 k msg/s here,
# too slow to stage 1,000,000 messages within nats.sh's time limits). Loopback only; every step is
# bounded in time.
#
# usage: scripts/bench-replication.sh            (env: NATS_SERVER, SYNC, BATCH, UNBATCHED_N, LAT_RATE, PARTS, REPS)
#   PARTS selects the steps (default "nats batched unbatched latency"), e.g. PARTS=unbatched runs only the
#   one-message-per-entry catch-up; its line also shows the process CPU per message.
set -euo pipefail
cd "$(dirname "$0")/.."
NATS_SERVER=${NATS_SERVER:-/work/benchbin/nats-server}
SYNC=${SYNC:-default}
BATCH=${BATCH:-100}             # messages per entry for the batched catch-up (pulsar-perf and the Go client batch)
UNBATCHED_N=${UNBATCHED_N:-1000000}
REPS=${REPS:-1}
LAT_RATE=${LAT_RATE:-5000}
PARTS=" ${PARTS:-nats batched unbatched latency} "
want() { [[ "$PARTS" == *" $1 "* ]]; }

echo "## machine: $(nproc) vCPU; $(uptime)"
# One test binary for every Meridian run, so each rep measures the same code without compiling.
tbin=$(mktemp -d)/replication.test
trap 'rm -rf "$(dirname "$tbin")"' EXIT
go test -c -o "$tbin" ./internal/replication
floors="$(dirname "$tbin")/machinelat"
(cd tests && go build -o "$floors" ./cmd/machinelat)
run() { # env assignments...; prints the test's figure lines
  (cd internal/replication && env "$@" timeout 20m "$tbin" -test.count=1 -test.timeout 20m -test.run "$TEST" -test.v 2>&1) |
    grep -E 'catch-up of|target storage|latency a->b|host: steal|FAIL|panic' || true
}
# The hypervisor's share ("steal" in /proc/stat) during the peer's runs; the Meridian tests print their own.
cpu_ticks() { awk '/^cpu /{print $9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat; }
steal_since() { cpu_ticks | { read -r s1 t1; echo "$1 $s1 $t1"; } | awk '{d=$4-$2; printf "    host: steal %.1f%% of CPU time (%d ticks)\n", (d > 0 ? 100*($3-$1)/d : 0), $3-$1}'; }
# REPS > 1 alternates the peer and Meridian, so every Meridian figure has a peer figure from minutes
# before it (this machine's disk and CPU change from one minute to the next).
for rep in $(seq "$REPS"); do
  [ "$REPS" -gt 1 ] && echo "## rep $rep of $REPS ($(date -u +%T))"
  if ! want nats; then
    echo "## NATS: skipped (PARTS)"
  elif [ -x "$NATS_SERVER" ] || command -v "$NATS_SERVER" >/dev/null 2>&1; then
    echo "## NATS JetStream mirror (SYNC=$SYNC)"
    t0=$(cpu_ticks)
    NATS_SERVER="$NATS_SERVER" SYNC="$SYNC" LAT_RATE="$LAT_RATE" timeout 20m ../shared/bench/nats.sh catchup $(want latency && echo latency) 2>&1 |
      grep -E 'mirror caught up|from create|latency run|origin A|mirror B \(' | grep -v 'msgs=0 ' || echo "(nats.sh failed)"
    steal_since "$t0"
  else
    echo "## NATS: $NATS_SERVER not found; skipping the peer"
  fi

  # NATS does not fsync before acknowledging: let its dirty pages reach the disk before Meridian runs,
  # so neither side's run pays for the other's writeback.
  t0=$SECONDS; sync; echo "## sync after the peer: $((SECONDS - t0)) s"
  echo "## Meridian: two in-process clusters over loopback TCP, fsync before every acknowledgement"
  if want batched; then TEST=TestReplicationCatchUpThroughput run MERIDIAN_BENCH_CATCHUP=1000000 MERIDIAN_BENCH_BATCH="$BATCH"; fi
  if want unbatched; then TEST=TestReplicationCatchUpThroughput run MERIDIAN_BENCH_CATCHUP="$UNBATCHED_N" MERIDIAN_BENCH_BATCH=1; fi
  if want latency; then
    echo "## this machine's floors (tests/cmd/machinelat; a message from A to B waits for two fsyncs and many wake-ups)"
    "$floors" --duration 10s --dir "${TMPDIR:-/tmp}" | sed 's/^/    /'
    TEST=TestReplicationLatency run MERIDIAN_BENCH_LATENCY="$LAT_RATE"
  fi
done
echo "## machine after: $(uptime)"
