#!/usr/bin/env bash
# Scale-out: the publish throughput of one cluster of N brokers against one broker, each broker
# process held to the same CPU share by a cgroup (v1 `cpu` controller), so the figure says what
# adding brokers gives and not how idle the host is. The brokers share an etcd (--metadata-store) and
# listen on 127.0.0.1..N; pulsar-client-go's perf producer (uncapped) publishes to a 12-partition
# topic through broker 1's URL only, finding the owners by lookup. Throughput is counted by the
# brokers: the sum of pulsar_in_messages_total on their /metrics over the measured window.
#
# usage: scripts/bench-scale.sh            (needs root: it creates cgroups)
# env:   BROKERS (3), QUOTA (10000 µs of CPU per 100 ms per broker, 0.1 CPU: low enough that the uncapped client is not the limit on 2 cores), SIZE (1024),
#        PARTITIONS (12), BUNDLES (64: the namespace's bundles), REPS (3 pairs), SECS (15 measured),
#        WARMUP (5), TOOLS (bench-lib.sh)
set -uo pipefail
. "$(dirname "$0")/bench-lib.sh"
BROKERS=${BROKERS:-3} QUOTA=${QUOTA:-10000} SIZE=${SIZE:-1024} PARTITIONS=${PARTITIONS:-12}
REPS=${REPS:-3} SECS=${SECS:-15} WARMUP=${WARMUP:-5} BUNDLES=${BUNDLES:-64}
cg=/sys/fs/cgroup/cpu
[ "$(id -u)" = 0 ] && [ -w "$cg" ] || { echo "needs root and a writable cgroup v1 cpu controller at $cg" >&2; exit 2; }
command -v etcd >/dev/null || { echo "needs the etcd binary on PATH" >&2; exit 2; }
for p in 16650 18080 12379 12380; do port_free $p || { echo "port $p is busy" >&2; exit 2; }; done
bench_tools || exit 2
work=$(mktemp -d)
pids=()
cleanup() {
  stop_pid "${pids[@]}"
  for i in $(seq "$BROKERS"); do rmdir "$cg/meridian-scale-$i" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
for i in $(seq "$BROKERS"); do
  mkdir -p "$cg/meridian-scale-$i"
  echo 100000 > "$cg/meridian-scale-$i/cpu.cfs_period_us"
  echo "$QUOTA" > "$cg/meridian-scale-$i/cpu.cfs_quota_us"
done

# in_total N: the messages the first N brokers have stored so far, from their /metrics.
in_total() {
  local i sum=0 n
  for i in $(seq "$1"); do
    n=$(curl -fs "http://127.0.0.$i:18080/metrics" | awk '/^pulsar_in_messages_total\{/{s+=$NF} END{printf "%d", s}')
    sum=$((sum + n))
  done
  echo "$sum"
}

# run N: a fresh etcd and N capped brokers; prints "N msgs_per_s share_1 ... share_N".
run() {
  local n=$1 d i pid prod etcdpid m0 m1 shares bpids=()
  d=$(mktemp -d -p "$work")
  etcd --data-dir "$d/etcd" --listen-client-urls http://127.0.0.1:12379 --advertise-client-urls http://127.0.0.1:12379 \
    --listen-peer-urls http://127.0.0.1:12380 >"$d/etcd.log" 2>&1 &
  etcdpid=$!; pids+=("$etcdpid")
  wait_http http://127.0.0.1:12379/health true || return 1
  for i in $(seq "$n"); do
    "$TOOLS/meridian" standalone --data-dir "$d/b$i" --broker-addr "127.0.0.$i:16650" --web-addr "127.0.0.$i:18080" \
      --metadata-store etcd://127.0.0.1:12379/scale --broker-id "b$i" >"$d/b$i.log" 2>&1 &
    pid=$!; pids+=("$pid"); bpids+=("$pid")
    echo "$pid" > "$cg/meridian-scale-$i/cgroup.procs"
    wait_http "http://127.0.0.$i:18080/admin/v2/brokers/ready" . || return 1
  done
  # Many bundles, so the partitions fall into distinct bundles and assignment can balance them.
  curl -fs -X PUT -H 'Content-Type: application/json' -d "{\"numBundles\":$BUNDLES}" \
    http://127.0.0.1:18080/admin/v2/namespaces/public/scale >/dev/null || return 1
  curl -fs -X PUT -H 'Content-Type: application/json' -d "$PARTITIONS" \
    http://127.0.0.1:18080/admin/v2/persistent/public/scale/scale/partitions >/dev/null || return 1
  perf_produce pulsar://127.0.0.1:16650 persistent://public/scale/scale 0 "$SIZE" >"$d/perf.log" 2>&1 &
  prod=$!; pids+=("$prod")
  sleep "$WARMUP"
  m0=$(in_total "$n")
  sleep "$SECS"
  m1=$(in_total "$n")
  shares=""
  for i in $(seq "$n"); do
    shares="$shares $(curl -fs "http://127.0.0.$i:18080/metrics" | awk '/^pulsar_in_messages_total\{/{s+=$NF} END{printf "%d", s}')"
  done
  stop_pid "$prod" "${bpids[@]}" "$etcdpid"
  echo "$n $(( (m1 - m0) / SECS ))$shares"
}

echo "# publish throughput, $SIZE B messages, $PARTITIONS partitions, each broker capped at $QUOTA us/100 ms, $SECS s measured"
results=$work/results
for rep in $(seq "$REPS"); do
  if [ $((rep % 2)) -eq 1 ]; then order="1 $BROKERS"; else order="$BROKERS 1"; fi
  for n in $order; do
    r=$(run "$n") || { echo "run with $n brokers failed" >&2; exit 1; }
    echo "$r" | tee -a "$results"
  done
done
one=$(awk '$1==1{print $2}' "$results" | median_spread)
many=$(awk -v n="$BROKERS" '$1==n{print $2}' "$results" | median_spread)
ratio=$(awk -v n="$BROKERS" '$1==1{a[++i]=$2} $1==n{b[++j]=$2} END{for(k=1;k<=i&&k<=j;k++) print b[k]/a[k]}' "$results" | median_spread)
echo "1 broker: $one msg/s; $BROKERS brokers: $many msg/s; ratio $ratio (budget 2.2 for 3)"
