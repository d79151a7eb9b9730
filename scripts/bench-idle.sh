#!/usr/bin/env bash
# Idle memory and CPU of a standalone broker and what a /metrics scrape costs it with many idle
# topics: RSS with no topics, after creating TOPICS topics and after they settle, the idle CPU; then
# SCRAPES scrapes of /metrics a few seconds apart (as Prometheus scrapes), each with its duration,
# size and the server's CPU, and the peak RSS over the scrapes; then STATS calls of
# /admin/v2/broker-stats/metrics (the same series as JSON entries), measured alike.
#
# usage: scripts/bench-idle.sh
# env:   TOPICS   idle topics to create (default 10000)
#        SCRAPES  /metrics scrapes (default 5), GAP seconds between them (default 5)
#        STATS    broker-stats/metrics calls after the scrapes (default 2; 0 skips them)
#        SETTLE   seconds to wait after creating the topics (default 10)
#        IDLE_SECS seconds over which the idle broker's CPU is measured before the scrapes (default 60;
#                 the replication manager's full pass over every topic runs every 30 s)
#        BIN      a meridian binary to measure instead of one built from this checkout
#        BROKER_FLAGS  extra flags for `meridian standalone` (e.g. "--hide-topic-level-metrics")
set -uo pipefail
. "$(dirname "$0")/bench-lib.sh"
TOPICS=${TOPICS:-10000} SCRAPES=${SCRAPES:-5} STATS=${STATS:-2} GAP=${GAP:-5} SETTLE=${SETTLE:-10} IDLE_SECS=${IDLE_SECS:-60}
for p in 16650 18080; do port_free $p || { echo "port $p is busy" >&2; exit 2; }; done
mkdir -p "$TOOLS"
if [ -n "${BIN:-}" ]; then cp "$BIN" "$TOOLS/meridian" || exit 2; else (cd "$repo" && go build -o "$TOOLS/meridian" ./cmd/meridian) || exit 2; fi
d=$(mktemp -d)
pids=()
trap 'stop_pid "${pids[@]}"; rm -rf "$d"' EXIT
# shellcheck disable=SC2086 # BROKER_FLAGS is a list of flags
start_meridian "$d" 16650 18080 ${BROKER_FLAGS:-} || exit 1
pid=$MERIDIAN_PID
pids+=("$pid")
web=http://127.0.0.1:18080
rss_mib() { awk '/VmRSS/{printf "%.1f", $2/1024}' "/proc/$pid/status"; }
sleep 2
base=$(rss_mib)
echo "no topics: RSS $base MiB"
t0=$(date +%s.%N)
# A hundred topics per curl process, four at a time: the client's cost stays small.
seq 0 $((TOPICS - 1)) | sed "s|.*|$web/admin/v2/persistent/public/default/idle-&|" |
  xargs -n 100 -P 4 curl -fs -X PUT -o /dev/null || { echo "creating topics failed" >&2; exit 1; }
t1=$(date +%s.%N)
echo "$TOPICS topics created in $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}') s: RSS $(rss_mib) MiB"
sleep "$SETTLE"
idle=$(rss_mib)
echo "after ${SETTLE} s: RSS $idle MiB, $(awk -v r="$idle" -v b="$base" -v n="$TOPICS" 'BEGIN{printf "%.0f", (r-b)*1048576/n}') B per topic above the broker without topics"
if [ "$IDLE_SECS" -gt 0 ]; then
  c0=$(cpu_s "$pid")
  sleep "$IDLE_SECS"
  c1=$(cpu_s "$pid")
  echo "idle CPU with $TOPICS topics: $(awk -v a="$c0" -v b="$c1" -v s="$IDLE_SECS" 'BEGIN{printf "%.2f", (b-a)*100/s}')% of one core over $IDLE_SECS s"
fi
for i in $(seq "$SCRAPES"); do
  c0=$(cpu_s "$pid")
  out=$(curl -fs -H 'Accept-Encoding: gzip' -o "$d/scrape.gz" -w '%{time_total} %{size_download}' "$web/metrics") || { echo "scrape failed" >&2; exit 1; }
  c1=$(cpu_s "$pid")
  text=$(gunzip -c "$d/scrape.gz" | wc -c)
  read -r secs gz <<<"$out"
  echo "scrape $i: ${secs} s, $text B of text ($gz B gzip), server CPU $(awk -v a="$c0" -v b="$c1" 'BEGIN{printf "%.2f", b-a}') s, RSS after $(rss_mib) MiB"
  sleep "$GAP"
done
echo "peak RSS over the scrapes: $(peak_rss_mib "$pid") MiB; RSS now $(rss_mib) MiB"
for i in $(seq "$STATS"); do
  c0=$(cpu_s "$pid")
  out=$(curl -fs -o "$d/stats.json" -w '%{time_total} %{size_download}' "$web/admin/v2/broker-stats/metrics") || { echo "broker-stats/metrics failed" >&2; exit 1; }
  c1=$(cpu_s "$pid")
  read -r secs size <<<"$out"
  echo "broker-stats/metrics $i: ${secs} s, $size B of JSON, server CPU $(awk -v a="$c0" -v b="$c1" 'BEGIN{printf "%.2f", b-a}') s, RSS after $(rss_mib) MiB"
  sleep "$GAP"
done
echo "peak RSS over the run: $(peak_rss_mib "$pid") MiB; RSS now $(rss_mib) MiB"
