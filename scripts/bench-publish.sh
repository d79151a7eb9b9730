#!/usr/bin/env bash
# Publish throughput and latency, Meridian next to the NATS JetStream peer, in one run on this machine.
# Loopback only; every process started here is stopped; every load loop is bounded in time.
#
# usage: scripts/bench-publish.sh            (results in $OUT, default /tmp/bench-publish)
# env:   TOOLS where the peer and the client tools are built or installed (scripts/bench-lib.sh)
#        DUR   seconds per Meridian producer run (default 30)
#        REPS  how many times to alternate the peer and Meridian (default 1)
#        CEILING=1 also runs the producer against a non-persistent topic of the same broker: no
#              storage at all, so its rate is what the client tool and the machine allow
#        BOTH=1 also runs the issue's exact form, `pulsar-perf.sh both`: a consumer on the topic while the
#              producer publishes unthrottled (three processes on the machine instead of two)
set -euo pipefail
. "$(dirname "$0")/bench-lib.sh"
OUT=${OUT:-/tmp/bench-publish}
DUR=${DUR:-30}
mkdir -p "$OUT"
bench_tools
BIN=$TOOLS

echo "# $(date -u +%FT%TZ) $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg)"

# The hypervisor's share ("steal" in /proc/stat): rates and tails on a shared host follow it, so every
# run prints it. cpu_ticks prints "steal total"; steal_since prints the share since such a reading.
cpu_ticks() { awk '/^cpu /{print $9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat; }
steal_since() { cpu_ticks | { read -r s1 t1; echo "$1 $s1 $t1"; } | awk '{d=$4-$2; printf "# host steal %.1f%% of CPU time (%d ticks)\n", (d > 0 ? 100*($3-$1)/d : 0), $3-$1}'; }
settle() { local t0=$SECONDS; sync; echo "# sync before the next run: $((SECONDS - t0)) s, dirty now $(grep -E '^Dirty' /proc/meminfo | tr -s ' ')"; }
run_perf() { # name, SIZE=.. RATE=.. (TOPIC_KIND=non-persistent for the ceiling, MODE=both for a consumer too)
  local name=$1; shift
  local "$@" # SIZE, RATE
  local t0 topic url=pulsar://127.0.0.1:46650 cons=
  t0=$(cpu_ticks)
  topic="${TOPIC_KIND:-persistent}://public/default/$name"
  # The perf tool prints a stats line every 10 s and can hang on shutdown, so only its stats lines are
  # read and run_for stops it with SIGKILL if SIGINT does not.
  if [ "${MODE:-produce}" = both ]; then
    perf_consume "$url" "$topic" > "$OUT/$name-consume.log" 2>&1 &
    cons=$!
    sleep 3 # the subscription exists before the producer starts
  fi
  run_for "$DUR" "$OUT/$name.log" perf_produce "$url" "$topic" "$RATE" "$SIZE"
  [ -n "$cons" ] && stop_pid "$cons"
  echo "### $name ($*)"; cat "$OUT/$name.log" ${cons:+"$OUT/$name-consume.log"} | grep -E 'Publish rate|Consume rate' | sed 's/.*\(Publish\|Consume\) rate/\1 rate/; s/\\[nt]//g; s/"$//' || true
  steal_since "$t0"
}
mpid=
trap 'if [ -n "$mpid" ]; then kill $mpid 2>/dev/null || true; wait $mpid 2>/dev/null || true; fi' EXIT

run_nats() {
  settle
  echo "## peer: NATS JetStream publish (bench/cmd/natsload, 1 KiB; sync: one at a time, async: 1,000 in flight)"
  local t0 d; t0=$(cpu_ticks)
  d=$(mktemp -d -p "$OUT")
  start_nats "$d" origin.conf
  for mode in sync async; do
    "$BIN/natsload" stream -url "$NATS_ORIGIN" -name ORDERS -subjects 'orders.>' >/dev/null
    "$BIN/natsload" pub -url "$NATS_ORIGIN" -subject orders.x -mode "$mode" -window 1000 -size 1024 \
      -n $([ $mode = sync ] && echo 50000 || echo 1000000) -maxdur "${DUR}s" 2>&1 | tee -a "$OUT/nats-pub.log"
  done
  stop_pid "$NATS_PID"; rm -rf "$d"
  steal_since "$t0"
}
run_meridian() {
  # NATS does not fsync before acknowledging: whatever it leaves dirty is written back before Meridian
  # starts, so neither side's run pays for the other's writeback.
  settle
  echo "## Meridian standalone (fsync before every receipt)"
  data="$OUT/meridian-data"
  rm -rf "$data"
  "$BIN/meridian" standalone --data-dir "$data" --broker-addr 127.0.0.1:46650 --web-addr 127.0.0.1:48080 > "$OUT/meridian.log" 2>&1 &
  mpid=$!
  for _ in $(seq 100); do curl -fs http://127.0.0.1:48080/admin/v2/brokers/ready >/dev/null 2>&1 && break; sleep 0.1; done
  grep -m1 'fsync=' "$OUT/meridian.log" | sed 's/.*\(fsync=[a-z]*\).*/\1/'
  run_perf perf-1k-unthrottled SIZE=1024 RATE=0 DUR="$DUR"
  run_perf perf-1k-5000 SIZE=1024 RATE=5000 DUR="$DUR"
  if [ "${CEILING:-0}" = 1 ]; then TOPIC_KIND=non-persistent run_perf perf-1k-ceiling-non-persistent SIZE=1024 RATE=0 DUR="$DUR"; fi
  if [ "${BOTH:-0}" = 1 ]; then MODE=both run_perf perf-1k-both SIZE=1024 RATE=0 DUR="$DUR"; fi
  kill $mpid 2>/dev/null || true; wait $mpid 2>/dev/null || true; mpid=
}
# REPS > 1 alternates the peer and Meridian, so every Meridian figure has a peer figure from a minute
# before or after it (this machine's disk and CPU change from one minute to the next), and swaps
# which one goes first in every other rep: a run right after the other side's can be slower (its
# writeback and freed memory), so a fixed order would favour one side.
for rep in $(seq "${REPS:-1}"); do
  [ "${REPS:-1}" -gt 1 ] && echo "## rep $rep of $REPS ($(date -u +%T))"
  if [ $((rep % 2)) -eq 1 ]; then run_nats; run_meridian; else run_meridian; run_nats; fi
done
