#!/usr/bin/env bash
# Replication benchmarks, side by side with NATS JetStream mirrors in the same run:
#   1. catch-up of 1,000,000 x 1 KiB into a second cluster (budget: >= 2x NATS mirror catch-up)
#   2. producer-on-A to consumer-on-B latency at 5,000 msg/s (budget: p50 <= 2 ms, p99 <= 10 ms)
# Both Meridian clusters fsync before acknowledging (the default). NATS runs with its default
# (no fsync before acknowledging, the fastest peer; with SYNC=always it publishes only ~3 k msg/s here,
# too slow to stage its backlog quickly). Loopback only; every step is
# bounded in time.
#
# usage: scripts/bench-replication.sh            (env: TOOLS, SYNC, BATCH, UNBATCHED_N, NATS_N, LAT_RATE, PARTS, REPS, CONSUMER, CONSUMER_CLIENT)
#   PARTS selects the steps (default "nats batched unbatched latency"), e.g. PARTS=unbatched runs only the
#   one-message-per-entry catch-up; its line also shows the process CPU per message.
#   CONSUMER=1 also measures each catch-up end to end: a consumer on the second cluster, started
#   with the catch-up in a process of its own, receives the whole backlog (on Meridian pulsar-client-go,
#   tests/cmd/catchup-consumer, or this repository's client with CONSUMER_CLIENT=meridian; on NATS
#   an ordered consumer of the mirror in natsload); its line follows the one for the target's
#   storage, which then shares the two cores with that consumer. Each line gives the consumer's CPU.
set -euo pipefail
. "$(dirname "$0")/bench-lib.sh"
cd "$repo"
NATS_N=${NATS_N:-1000000}        # the peer's backlog for its mirror catch-up
SYNC=${SYNC:-default}
BATCH=${BATCH:-100}             # messages per entry for the batched catch-up (pulsar-perf and the Go client batch)
UNBATCHED_N=${UNBATCHED_N:-1000000}
REPS=${REPS:-1}
LAT_RATE=${LAT_RATE:-5000}
CONSUMER=${CONSUMER:-0}
CONSUMER_CLIENT=${CONSUMER_CLIENT:-pulsar-client-go}
consume_flag=(); [ "$CONSUMER" = 1 ] && consume_flag=(-consume)
PARTS=" ${PARTS:-nats batched unbatched latency} "
want() { [[ "$PARTS" == *" $1 "* ]]; }

echo "## machine: $(nproc) vCPU; $(uptime)"
# One test binary for every Meridian run, so each rep measures the same code without compiling.
tbin=$(mktemp -d)/replication.test
trap 'rm -rf "$(dirname "$tbin")"' EXIT
go test -c -o "$tbin" ./internal/replication
want nats && bench_tools
floors="$(dirname "$tbin")/machinelat"
(cd tests && go build -o "$floors" ./cmd/machinelat)
consumer_cmd=
if [ "$CONSUMER" = 1 ] && [ "$CONSUMER_CLIENT" != meridian ]; then
  consumer_cmd="$(dirname "$tbin")/catchup-consumer"
  (cd tests && go build -o "$consumer_cmd" ./cmd/catchup-consumer)
fi
run() { # env assignments...; prints the test's figure lines
  (cd internal/replication && env "$@" timeout 20m "$tbin" -test.count=1 -test.timeout 20m -test.run "$TEST" -test.v 2>&1) |
    grep -E 'catch-up of|catch-up end to end|target storage|latency a->b|host: steal|FAIL|panic' || true
}
# The hypervisor's share ("steal" in /proc/stat) during the peer's runs; the Meridian tests print their own.
cpu_ticks() { awk '/^cpu /{print $9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat; }
steal_since() { cpu_ticks | { read -r s1 t1; echo "$1 $s1 $t1"; } | awk '{d=$4-$2; printf "    host: steal %.1f%% of CPU time (%d ticks)\n", (d > 0 ? 100*($3-$1)/d : 0), $3-$1}'; }
# REPS > 1 alternates the peer and Meridian, so every Meridian figure has a peer figure from minutes
# before it (this machine's disk and CPU change from one minute to the next).
for rep in $(seq "$REPS"); do
  [ "$REPS" -gt 1 ] && echo "## rep $rep of $REPS ($(date -u +%T))"
  if want nats; then
    echo "## NATS JetStream mirror (SYNC=$SYNC), $NATS_N x 1 KiB"
    t0=$(cpu_ticks)
    nd=$(mktemp -d)
    start_nats_pair "$nd" "$SYNC"
    "$TOOLS/natsload" stream -url "$NATS_ORIGIN" -name ORDERS -subjects 'orders.>' >/dev/null
    "$TOOLS/natsload" pub -url "$NATS_ORIGIN" -subject orders.x -mode async -window 1000 -size 1024 -n "$NATS_N" -maxdur 300s
    "$TOOLS/natsload" mirror -url "$NATS_MIRROR" -name ORDERS_MIRROR -source ORDERS -domain hub -expect "$NATS_N" "${consume_flag[@]}" -timeout 600s || echo "(mirror did not catch up)"
    if want latency; then
      "$TOOLS/natsload" stream -url "$NATS_ORIGIN" -name LAT -subjects 'lat.>' >/dev/null
      "$TOOLS/natsload" mirror -url "$NATS_MIRROR" -name LAT_MIRROR -source LAT -domain hub >/dev/null
      "$TOOLS/natsload" latency -urla "$NATS_ORIGIN" -urlb "$NATS_MIRROR" -mirror LAT_MIRROR -subject lat.x \
        -rate "$LAT_RATE" -dur 30s -size 1024 -warmup 2s -drain 15s
    fi
    stop_pid "$NATS_ORIGIN_PID" "$NATS_MIRROR_PID"; rm -rf "$nd"
    steal_since "$t0"
  else
    echo "## NATS: skipped (PARTS)"
  fi

  # NATS does not fsync before acknowledging: let its dirty pages reach the disk before Meridian runs,
  # so neither side's run pays for the other's writeback.
  t0=$SECONDS; sync; echo "## sync after the peer: $((SECONDS - t0)) s"
  echo "## Meridian: two in-process clusters over loopback TCP, fsync before every acknowledgement"
  if want batched; then TEST=TestReplicationCatchUpThroughput run MERIDIAN_BENCH_CATCHUP=1000000 MERIDIAN_BENCH_BATCH="$BATCH" MERIDIAN_BENCH_CONSUMER="$CONSUMER" MERIDIAN_BENCH_CONSUMER_CMD="$consumer_cmd"; fi
  if want unbatched; then TEST=TestReplicationCatchUpThroughput run MERIDIAN_BENCH_CATCHUP="$UNBATCHED_N" MERIDIAN_BENCH_BATCH=1 MERIDIAN_BENCH_CONSUMER="$CONSUMER" MERIDIAN_BENCH_CONSUMER_CMD="$consumer_cmd"; fi
  if want latency; then
    echo "## this machine's floors (tests/cmd/machinelat; a message from A to B waits for two fsyncs and many wake-ups)"
    "$floors" --duration 10s --dir "${TMPDIR:-/tmp}" | sed 's/^/    /'
    TEST=TestReplicationLatency run MERIDIAN_BENCH_LATENCY="$LAT_RATE"
  fi
done
echo "## machine after: $(uptime)"
