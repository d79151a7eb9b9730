#!/usr/bin/env bash
# Server CPU per message, Meridian next to NATS JetStream, side by side in one run, at fixed rates.
# On a 2-core machine this is the figure the broker alone decides (a throughput ratio between two client
# tools mostly measures the clients). It prints one line per run and then the table of docs/performance.md.
#
#   Meridian: `meridian standalone` built from this checkout (fsync before every receipt), driven by
#             pulsar-client-go's perf tool (perf_produce in scripts/bench-lib.sh: 1 ms batches of up to 1,000).
#   NATS:     nats-server v2.15.2, JetStream file store with its default (fsync every 2 minutes), driven by
#             bench/cmd/natsload (`pub -mode async -window 1000 -rate RATE`).
#   CPU:      the server process's utime+stime (/proc/PID/stat) over a steady window of SECS seconds that
#             starts WARMUP seconds after the clients; messages: what the server stored in that window
#             (Meridian: the topic's msgInCounter; NATS: /jsz messages). Peak RSS: the server's VmHWM.
#   Floor:    this machine's least CPU per fsync'd group commit (tests/cmd/machinelat --cpu-floor: one
#             goroutine reads a batch, writes it, fdatasyncs, replies), divided by Meridian's messages per
#             group commit in each run: what a bare Go loop that fsyncs each commit spends per message.
#             It runs with the Go runtime setting the broker runs with (GODEBUG=schedtrace=2147483647,
#             docs/design.md "The process and the Go runtime").
#
# usage: scripts/bench-cpu.sh
# env:   RATES        fixed rates, msg/s (default "5000 20000 50000")
#        REPS         runs per rate and server, alternating which server goes first (default 5)
#        SECS         measured seconds per run (default 20); WARMUP seconds before it (default 3)
#        SIZE         payload bytes (default 1024)
#        MODES        "pub" (publish only), "both" (a consumer attached: publish + dispatch) (default "pub both")
#        FLOOR        1 (default) measures the CPU floor first (10 s with and 10 s without fdatasync)
#        UNTHROTTLED  1 (default) also runs each server once unthrottled and reports msg/s with both the
#                     server's and the client processes' CPU, so a reader sees what limits it
# The tools are built or installed by scripts/bench-lib.sh through the Go module proxy.
set -uo pipefail
. "$(dirname "$0")/bench-lib.sh"
RATES=${RATES:-"5000 20000 50000"} REPS=${REPS:-5} SECS=${SECS:-20} WARMUP=${WARMUP:-3} SIZE=${SIZE:-1024}
MODES=${MODES:-"pub both"} UNTHROTTLED=${UNTHROTTLED:-1} FLOOR=${FLOOR:-1}
MB=16650 MW=18080 NW=18222
for p in $MB $MW 14222 $NW 17422; do port_free $p || { echo "port $p is busy" >&2; exit 2; }; done
bench_tools || { echo "could not build or install the tools" >&2; exit 2; }
work=$(mktemp -d)
pids=()
trap 'stop_pid "${pids[@]}"; rm -rf "$work"' EXIT
results=$work/results
echo "# $(nproc) cores; SECS=$SECS WARMUP=$WARMUP SIZE=$SIZE REPS=$REPS"
floor=-
if [ "$FLOOR" = 1 ]; then
  (cd "$repo/tests" && go build -o "$work/machinelat" ./cmd/machinelat) || exit 2
  GODEBUG=schedtrace=2147483647 "$work/machinelat" --cpu-floor --duration 10s --dir "$work" | tee "$work/floor" || echo "the CPU floor was not measured" >&2
  floor=$(sed -n 's/.*fdatasync, reply.*: \([0-9.]*\) µs per round.*/\1/p' "$work/floor")
  floor=${floor:--}
fi

# measure SERVER_PID COUNT_CMD COMMITS_CMD CLIENT_PIDS...: waits WARMUP, then measures SECS seconds;
# prints "us_per_msg msgs_per_s client_us_per_msg... mpc=msgs_per_commit" for the window (COMMITS_CMD
# "-": no commit count, mpc=-).
measure() {
  local spid=$1 count=$2 commits=$3; shift 3
  sleep "$WARMUP"
  local c0 m0 k0=0 c1 m1 k1=0 p cl0=() cl1=()
  c0=$(cpu_s "$spid"); m0=$($count); [ "$commits" = - ] || k0=$($commits)
  for p in "$@"; do cl0+=("$(cpu_s "$p" 2>/dev/null || echo 0)"); done
  sleep "$SECS"
  c1=$(cpu_s "$spid"); m1=$($count); [ "$commits" = - ] || k1=$($commits)
  for p in "$@"; do cl1+=("$(cpu_s "$p" 2>/dev/null || echo 0)"); done
  awk -v c0="$c0" -v c1="$c1" -v m0="$m0" -v m1="$m1" -v k0="$k0" -v k1="$k1" -v s="$SECS" -v a="${cl0[*]}" -v b="${cl1[*]}" 'BEGIN{
    num = "^[0-9.e+]+$"
    k = split(a, x, " "); split(b, y, " ")
    n = m1 - m0
    if (m0 !~ num || m1 !~ num || n < 1) { # no count: a "-" for every figure, which the table skips
      printf "- -"; for (i = 1; i <= k; i++) printf " -"; printf " mpc=-\n"; exit }
    printf "%.2f %.0f", (c1-c0)*1e6/n, n/s
    for (i = 1; i <= k; i++) printf " %.2f", (y[i]-x[i])*1e6/n
    if (k0 ~ num && k1 ~ num && k1 > k0) printf " mpc=%.1f\n", n/(k1-k0); else printf " mpc=-\n" }'
}

run_meridian() { # RATE MODE
  local rate=$1 mode=$2 d topic=perf-cpu cons= prod out rss
  d=$(mktemp -d -p "$work")
  start_meridian "$d" $MB $MW || { echo "meridian did not start" >&2; return 1; }
  pids+=("$MERIDIAN_PID")
  curl -fs -X PUT "http://127.0.0.1:$MW/admin/v2/persistent/public/default/$topic" >/dev/null
  if [ "$mode" = both ]; then
    perf_consume "pulsar://127.0.0.1:$MB" "persistent://public/default/$topic" >"$d/consume.log" 2>&1 &
    cons=$!; pids+=("$cons"); sleep 1
  fi
  perf_produce "pulsar://127.0.0.1:$MB" "persistent://public/default/$topic" "$rate" "$SIZE" >"$d/produce.log" 2>&1 &
  prod=$!; pids+=("$prod")
  out=$(measure "$MERIDIAN_PID" "meridian_msg_in $MW $topic" "meridian_commits $MW" $prod $cons)
  rss=$(peak_rss_mib "$MERIDIAN_PID")
  stop_pid $prod $cons "$MERIDIAN_PID"
  echo "meridian $mode $rate $out rss=$rss"
}

run_nats() { # RATE MODE
  local rate=$1 mode=$2 d cons= prod out rss limit=$((WARMUP + SECS + 30))
  d=$(mktemp -d -p "$work")
  start_nats "$d" origin.conf || { echo "nats-server did not start" >&2; return 1; }
  pids+=("$NATS_PID")
  "$TOOLS/natsload" stream -url nats://acc:acc@127.0.0.1:14222 -name ORDERS -subjects 'orders.>' >/dev/null || return 1
  if [ "$mode" = both ]; then
    "$TOOLS/natsload" consume -url nats://acc:acc@127.0.0.1:14222 -stream ORDERS -n 1000000000 -maxdur "${limit}s" >"$d/consume.log" 2>&1 &
    cons=$!; pids+=("$cons"); sleep 1
  fi
  "$TOOLS/natsload" pub -url nats://acc:acc@127.0.0.1:14222 -subject orders.x -mode async -window 1000 \
    -size "$SIZE" -rate "$rate" -n 1000000000 -maxdur "${limit}s" >"$d/pub.log" 2>&1 &
  prod=$!; pids+=("$prod")
  out=$(measure "$NATS_PID" "nats_messages $NW" - $prod $cons)
  rss=$(peak_rss_mib "$NATS_PID")
  stop_pid $prod $cons "$NATS_PID"
  echo "nats $mode $rate $out rss=$rss"
}

# One line per run: server mode rate us_per_msg msgs_per_s client_us_per_msg... mpc=msgs_per_commit rss=MiB
for mode in $MODES; do
  for rate in $RATES; do
    for rep in $(seq "$REPS"); do
      if [ $((rep % 2)) -eq 1 ]; then order="meridian nats"; else order="nats meridian"; fi
      for s in $order; do "run_$s" "$rate" "$mode" >>"$results"; tail -1 "$results"; done
    done
  done
done
if [ "$UNTHROTTLED" = 1 ]; then
  for s in meridian nats; do "run_$s" 0 pub >>"$results"; tail -1 "$results"; done
fi

echo
echo "## server CPU per message (us), median (min-max) of $REPS runs, ${SIZE} B messages"
echo "## floor: this machine's CPU floor of an fsync'd round of 6,400 B ($floor us) / Meridian's median messages per group commit"
echo "| mode | rate msg/s | Meridian | NATS | Meridian / NATS | peak RSS MiB Meridian / NATS | messages per commit | floor (6.4 KB rounds) |"
echo "|---|---|---|---|---|---|---|---|"
for mode in $MODES; do
  for rate in $RATES; do
    m=$(awk -v o="$mode" -v r="$rate" '$1=="meridian" && $2==o && $3==r && $4!="-" {print $4}' "$results" | median_spread)
    n=$(awk -v o="$mode" -v r="$rate" '$1=="nats" && $2==o && $3==r && $4!="-" {print $4}' "$results" | median_spread)
    mr=$(awk -v o="$mode" -v r="$rate" '$1=="meridian" && $2==o && $3==r {sub("rss=", "", $NF); print $NF}' "$results" | sort -n | tail -1)
    nr=$(awk -v o="$mode" -v r="$rate" '$1=="nats" && $2==o && $3==r {sub("rss=", "", $NF); print $NF}' "$results" | sort -n | tail -1)
    ratio=$(awk -v a="${m%% *}" -v b="${n%% *}" 'BEGIN{ if (b > 0) printf "%.2f", a/b; else print "-" }')
    mpc=$(awk -v o="$mode" -v r="$rate" '$1=="meridian" && $2==o && $3==r {for (i = 6; i <= NF; i++) if ($i ~ /^mpc=[0-9]/) print substr($i, 5)}' "$results" | median_spread)
    fl=$(awk -v f="$floor" -v k="${mpc%% *}" 'BEGIN{ if (f != "-" && k > 0) printf "%.2f", f/k; else print "-" }')
    echo "| $mode | $rate | $m | $n | $ratio | $mr / $nr | ${mpc%% *} | $fl |"
  done
done
if [ "$UNTHROTTLED" = 1 ]; then
  echo
  echo "## unthrottled publish, one run each: msg/s, and CPU per message (us) of the server and the client"
  awk '$3==0 && $2=="pub" && $4!="-" {printf "| %s | %s msg/s | server %s us | client %s us | peak RSS %s |\n", $1, $5, $4, $6, substr($NF, 5)}' "$results"
fi
