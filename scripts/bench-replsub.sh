#!/usr/bin/env bash
# Replicated subscriptions: the sync lag, and what they cost the source broker in CPU.
# Two `meridian standalone` processes, clusters a and b (each its own process, so the source broker's
# CPU is separable from the other broker's and from the clients'), namespace bench/rs replicating
# a -> b (b's namespace lists only b: a one-way link). On a, pulsar-client-go's perf tool publishes
# 1 KiB messages in batches (perf_produce in scripts/bench-lib.sh) at a fixed rate and a perf consumer
# (Exclusive, durable) consumes and acknowledges every message.
#
#   lag:  the namespace policy replicateSubscriptionState=true makes the consumer's subscription
#         replicated. For SECS seconds after WARMUP the script samples, every 100 ms, the subscription's
#         replicatedSubscriptionSync.outbound.b.syncLagMs on a (topic stats) and prints its median,
#         p99 and max, with the subscription's backlog (does the consumer keep up?) and the rate a
#         stored. One run per rate in LAG_RATES.
#   cpu:  a's process utime+stime (/proc/PID/stat) over SECS seconds after WARMUP, divided by the
#         messages a stored in that window (the topic's msgInCounter, which counts published messages
#         only, not state markers), at CPU_RATE, with the replication a -> b and the consumer in both
#         cases; "with": the policy is true, "without": it is not set (the subscription is not
#         replicated). REPS pairs, alternating which goes first; each run starts both brokers afresh.
#         Nothing polls the brokers inside the window.
#
# usage: scripts/bench-replsub.sh
# env:   LAG_RATES  rates for the lag runs, msg/s (default "2000 20000"; empty: none)
#        CPU_RATE   rate for the CPU runs, msg/s (default 5000); REPS pairs (default 5; 0: none)
#        SECS       measured seconds per run (default 20); WARMUP seconds before it (default 5)
#        SIZE       payload bytes (default 1024)
#        TOOLS      where meridian and perf are built/installed (scripts/bench-lib.sh)
#        PROFILE    perf: after the runs above, one more "with" run at CPU_RATE under Linux perf
#                   (perf record -g on a's process for SECS seconds); prints the inclusive share of a's
#                   CPU in the replicated subscription's own code (the state sync loop, taking and
#                   encoding states, appending markers) and leaves perf.data in OUT (default
#                   $TMPDIR/meridian-profile-replsub) for `perf report -i OUT/perf.data --children`
set -uo pipefail
. "$(dirname "$0")/bench-lib.sh"
LAG_RATES=${LAG_RATES-"2000 20000"} CPU_RATE=${CPU_RATE:-5000} REPS=${REPS:-5}
SECS=${SECS:-20} WARMUP=${WARMUP:-5} SIZE=${SIZE:-1024} PROFILE=${PROFILE:-none}
OUT=${OUT:-${TMPDIR:-/tmp}/meridian-profile-replsub}
AB=16760 AW=18190 BB=16761 BW=18191 # broker and web ports of a and b
TOPIC=persistent://bench/rs/replsub SUB=perf-sub
STATS=http://127.0.0.1:$AW/admin/v2/persistent/bench/rs/replsub/stats
for p in $AB $AW $BB $BW; do port_free $p || { echo "port $p is busy" >&2; exit 2; }; done
mkdir -p "$TOOLS"
(cd "$repo" && go build -o "$TOOLS/meridian" ./cmd/meridian) || { echo "could not build meridian" >&2; exit 2; }
[ -x "$TOOLS/perf" ] || GOBIN=$TOOLS go install "github.com/apache/pulsar-client-go/perf@$PERF_VERSION" || exit 2
work=$(mktemp -d)
pids=()
trap 'stop_pid "${pids[@]}"; rm -rf "$work"' EXIT
results=$work/results
echo "# $(nproc) cores; SECS=$SECS WARMUP=$WARMUP SIZE=$SIZE REPS=$REPS CPU_RATE=$CPU_RATE LAG_RATES=$LAG_RATES"

# admin WEB_PORT METHOD PATH [JSON]: one admin call; fails on an HTTP error.
admin() {
  curl -fsS -X "$2" -H 'Content-Type: application/json' ${4:+-d "$4"} "http://127.0.0.1:$1/admin/v2/$3" >/dev/null
}

# start_pair DIR REPLICATED: clusters a and b, registered in each other, bench/rs replicating a -> b;
# REPLICATED=1 sets a's namespace policy replicateSubscriptionState=true. Sets A_PID and B_PID.
start_pair() {
  local d=$1 c port
  for c in a b; do
    mkdir -p "$d/$c"
    if [ $c = a ]; then port=($AB $AW); else port=($BB $BW); fi
    "$TOOLS/meridian" standalone --cluster $c --data-dir "$d/$c/data" --broker-addr "127.0.0.1:${port[0]}" \
      --web-addr "127.0.0.1:${port[1]}" >"$d/$c/meridian.log" 2>&1 &
    pids+=("$!")
    if [ $c = a ]; then A_PID=$!; else B_PID=$!; fi
  done
  wait_http "http://127.0.0.1:$AW/admin/v2/brokers/ready" . || return 1
  wait_http "http://127.0.0.1:$BW/admin/v2/brokers/ready" . || return 1
  admin $AW PUT clusters/b "{\"serviceUrl\":\"http://127.0.0.1:$BW\",\"brokerServiceUrl\":\"pulsar://127.0.0.1:$BB\"}" || return 1
  admin $BW PUT clusters/a "{\"serviceUrl\":\"http://127.0.0.1:$AW\",\"brokerServiceUrl\":\"pulsar://127.0.0.1:$AB\"}" || return 1
  for c in $AW $BW; do
    admin $c PUT tenants/bench '{"adminRoles":[],"allowedClusters":["a","b"]}' || return 1
    admin $c PUT namespaces/bench/rs || return 1
  done
  admin $AW POST namespaces/bench/rs/replication '["a","b"]' || return 1
  admin $BW POST namespaces/bench/rs/replication '["b"]' || return 1
  if [ "$2" = 1 ]; then admin $AW POST namespaces/bench/rs/replicateSubscriptionState true || return 1; fi
  admin $AW PUT persistent/bench/rs/replsub || return 1
}

# clients RATE DIR: the perf consumer (subscribed first) and producer on a; sets CONS_PID and PROD_PID.
clients() {
  "$TOOLS/perf" consume "$TOPIC" --service-url "pulsar://127.0.0.1:$AB" --max-connections 1 --metrics -1 \
    --subscription $SUB --subscription-type 0 --subscription-mode 0 --receiver-queue-size 1000 >"$2/consume.log" 2>&1 &
  CONS_PID=$!; pids+=("$CONS_PID")
  wait_http "$STATS" "\"$SUB\"" || return 1
  "$TOOLS/perf" produce "$TOPIC" --service-url "pulsar://127.0.0.1:$AB" --max-connections 1 --metrics -1 \
    --rate "$1" --size "$SIZE" --batching-time 1 --batching-num-messages 1000 --batching-max-size 128 \
    --queue-size 1000 >"$2/produce.log" 2>&1 &
  PROD_PID=$!; pids+=("$PROD_PID")
}

# sample_lag SECS: polls a's topic stats every 100 ms for SECS seconds; prints "samples median p99 max
# backlog_max msg_per_s" of the subscription's outbound sync lag to b (ms).
sample_lag() {
  python3 - "$STATS" "$SUB" "$1" <<'EOF'
import json, sys, time, urllib.request
url, sub, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
lags, backlog, n0, t0 = [], 0, None, time.monotonic()
while True:
    now = time.monotonic()
    st = json.load(urllib.request.urlopen(url, timeout=5))
    if n0 is None:
        n0, start = st.get("msgInCounter", 0), now
    s = st.get("subscriptions", {}).get(sub, {})
    out = (s.get("replicatedSubscriptionSync") or {}).get("outbound", {}).get("b")
    if out is not None:
        lags.append(out["syncLagMs"])
    backlog = max(backlog, s.get("msgBacklog", 0))
    if now - t0 >= secs:
        rate = (st.get("msgInCounter", 0) - n0) / max(now - start, 1e-9)
        break
    time.sleep(max(0.0, 0.1 - (time.monotonic() - now)))
if not lags:
    print("0 - - - %d %.0f" % (backlog, rate)); sys.exit()
lags.sort()
pct = lambda q: lags[min(len(lags) - 1, int(q * len(lags)))]
print("%d %d %d %d %d %.0f" % (len(lags), pct(0.5), pct(0.99), lags[-1], backlog, rate))
EOF
}

run_lag() { # RATE
  local d out
  d=$(mktemp -d -p "$work")
  start_pair "$d" 1 || { echo "clusters did not start" >&2; stop_pid "$A_PID" "$B_PID"; return 1; }
  clients "$1" "$d" || { stop_pid "$CONS_PID" "$A_PID" "$B_PID"; return 1; }
  sleep "$WARMUP"
  out=$(sample_lag "$SECS")
  stop_pid "$PROD_PID" "$CONS_PID" "$A_PID" "$B_PID"
  echo "lag $1 $out"
}

run_cpu() { # RATE REPLICATED(0|1) [perf]
  local d out c0 c1 m0 m1
  d=$(mktemp -d -p "$work")
  start_pair "$d" "$2" || { echo "clusters did not start" >&2; stop_pid "$A_PID" "$B_PID"; return 1; }
  clients "$1" "$d" || { stop_pid "$CONS_PID" "$A_PID" "$B_PID"; return 1; }
  sleep "$WARMUP"
  c0=$(cpu_s "$A_PID"); m0=$(curl -fs "$STATS" | python3 -c 'import json,sys; print(json.load(sys.stdin)["msgInCounter"])')
  if [ "${3:-}" = perf ]; then
    perf record -F 999 -g -p "$A_PID" -o "$OUT/perf.data" -- sleep "$SECS" >/dev/null 2>&1
  else
    sleep "$SECS"
  fi
  c1=$(cpu_s "$A_PID"); m1=$(curl -fs "$STATS" | python3 -c 'import json,sys; print(json.load(sys.stdin)["msgInCounter"])')
  # The subscription must be replicated exactly in the "with" runs.
  out=$(curl -fs "$STATS" | python3 -c 'import json,sys; s=json.load(sys.stdin)["subscriptions"]["'$SUB'"]; print(int(bool(s.get("isReplicated"))), s.get("msgBacklog", 0))')
  stop_pid "$PROD_PID" "$CONS_PID" "$A_PID" "$B_PID"
  awk -v r="$1" -v w="$2" -v c0="$c0" -v c1="$c1" -v m0="$m0" -v m1="$m1" -v s="$SECS" -v o="$out" 'BEGIN{
    n = m1 - m0; if (n < 1) n = 1
    split(o, x, " ")
    printf "cpu %s %s %.2f %.0f replicated=%s backlog=%s\n", (w ? "with" : "without"), r, (c1-c0)*1e6/n, n/s, x[1], x[2] }'
}

for rate in $LAG_RATES; do
  run_lag "$rate" | tee -a "$results"
done
for rep in $(seq "$REPS"); do
  if [ $((rep % 2)) -eq 1 ]; then order="1 0"; else order="0 1"; fi
  for w in $order; do
    sync
    run_cpu "$CPU_RATE" "$w" | tee -a "$results"
  done
done
if [ "$PROFILE" = perf ]; then
  mkdir -p "$OUT"
  run_cpu "$CPU_RATE" 1 perf | sed 's/^cpu with/profiled with/' | tee -a "$results"
fi

echo
if [ -n "$LAG_RATES" ]; then
  echo "## replicated subscription sync lag a -> b (outbound.b.syncLagMs on a, sampled every 100 ms for ${SECS} s)"
  echo "| rate msg/s | stored msg/s | samples | median ms | p99 ms | max ms | max backlog |"
  echo "|---|---|---|---|---|---|---|"
  awk '$1=="lag" {printf "| %s | %s | %s | %s | %s | %s | %s |\n", $2, $8, $3, $4, $5, $6, $7}' "$results"
fi
if [ "$REPS" -gt 0 ]; then
  w=$(awk '$1=="cpu" && $2=="with" {print $4}' "$results" | median_spread)
  wo=$(awk '$1=="cpu" && $2=="without" {print $4}' "$results" | median_spread)
  echo
  echo "## source broker CPU per message (us), median (min-max) of $REPS runs each, $CPU_RATE msg/s x $SIZE B, a consumer acknowledging"
  echo "| replicated subscription | not replicated | cost |"
  echo "|---|---|---|"
  awk -v a="${w%% *}" -v b="${wo%% *}" -v w="$w" -v wo="$wo" 'BEGIN{ printf "| %s | %s | %+.1f%% |\n", w, wo, (b > 0 ? (a/b-1)*100 : 0) }'
fi
if [ "$PROFILE" = perf ]; then
  echo
  echo "## where a's CPU goes in the profiled run: inclusive share of the replicated subscription's own code"
  # Children (inclusive) percentages of every symbol of the feature; the loop's share covers what it calls.
  perf report -i "$OUT/perf.data" --children --sort sym --stdio -g none 2>/dev/null |
    grep -E 'subSync|SubscriptionState|StateMarker|ExportState|TranslateState|[aA]ppendMarker|syncChanged|markerStored|MarkerStored|SubscriptionAckState|isMarker|[mM]arker' |
    head -25
fi
