#!/usr/bin/env bash
# Where a standalone broker's CPU goes while pulsar-perf publishes at a fixed rate: the server's user and
# system CPU per message over a steady window, and optionally a kernel+user profile (Linux perf) or a
# system-call count (strace) of the broker over the same window.
#
# usage: scripts/profile-publish.sh [RATE]       (default 5000 msg/s, 1 KiB)
# env:   SECS     measured seconds (default 10)
#        PROFILE  none (default), perf (perf record -g; then `perf report -i $OUT/perf.data --no-children
#                 --sort sym -G`), or strace (strace -c -f; the table is printed)
#        OUT      where perf.data and the logs go (default $TMPDIR/meridian-profile)
#        BROKER_FLAGS  extra flags for `meridian standalone` (e.g. "--fsync interval")
#        BATCH_MS the producer's batching time in ms (default 1)
#        GOMAXPROCS and other Go variables are passed to the broker.
set -uo pipefail
. "$(dirname "$0")/bench-lib.sh"
rate=${1:-5000} SECS=${SECS:-10} PROFILE=${PROFILE:-none}
OUT=${OUT:-${TMPDIR:-/tmp}/meridian-profile}
mkdir -p "$OUT"
for p in 16650 18080; do port_free $p || { echo "port $p is busy" >&2; exit 2; }; done
bench_tools || exit 2
d=$(mktemp -d)
pids=()
trap 'stop_pid "${pids[@]}"; rm -rf "$d"' EXIT
# shellcheck disable=SC2086 # BROKER_FLAGS is a list of flags
start_meridian "$d" 16650 18080 ${BROKER_FLAGS:-} || exit 1
pids+=("$MERIDIAN_PID")
curl -fs -X PUT http://127.0.0.1:18080/admin/v2/persistent/public/default/profile >/dev/null
perf_produce pulsar://127.0.0.1:16650 persistent://public/default/profile "$rate" 1024 >"$OUT/produce.log" 2>&1 &
pids+=($!)
sleep 3
read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$MERIDIAN_PID/stat")
m0=$(meridian_msg_in 18080 profile)
case "$PROFILE" in
  perf) perf record -F 999 -g -p "$MERIDIAN_PID" -o "$OUT/perf.data" -- sleep "$SECS" >/dev/null 2>&1 ;;
  strace) timeout -s INT "$SECS" strace -c -f -p "$MERIDIAN_PID" -o "$OUT/strace.txt" 2>/dev/null ;;
  *) sleep "$SECS" ;;
esac
read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$MERIDIAN_PID/stat")
m1=$(meridian_msg_in 18080 profile)
awk -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v n=$((m1 - m0)) -v t="$(getconf CLK_TCK)" -v r="$rate" 'BEGIN {
  if (n < 1) { print "no messages stored"; exit 1 }
  printf "%d msg/s x 1 KiB: %d messages, server CPU %.1f us/msg (user %.1f, system %.1f)\n", r, n, (u + s) * 1e6 / t / n, u * 1e6 / t / n, s * 1e6 / t / n }'
curl -fs http://127.0.0.1:18080/metrics | awk '/^meridian_storage_commit_seconds_count/ {print "group commits so far: " $2}'
[ "$PROFILE" = strace ] && head -20 "$OUT/strace.txt"
[ "$PROFILE" = perf ] && echo "profile: perf report -i $OUT/perf.data --no-children --sort sym -G"
exit 0
