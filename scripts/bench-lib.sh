# Shared by scripts/bench-*.sh (sourced, not run): builds Meridian from this checkout, installs the peer
# and the client tools through the Go module proxy into $TOOLS, and starts and measures servers.
# Nothing here depends on a path outside the repository; every server it starts listens on loopback.
#
#   TOOLS  where the binaries go (default: $TMPDIR/meridian-bench-tools); kept between runs
#
# The peer is NATS JetStream v2.15.2 and the Pulsar client tool is pulsar-client-go's perf v0.19.0: the
# versions behind every figure in docs/performance.md.

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS=${TOOLS:-${TMPDIR:-/tmp}/meridian-bench-tools}
NATS_VERSION=v2.15.2
PERF_VERSION=v0.19.0

# bench_tools builds meridian and natsload and installs nats-server and perf when missing.
bench_tools() {
  mkdir -p "$TOOLS"
  (cd "$repo" && go build -o "$TOOLS/meridian" ./cmd/meridian) || return 1
  (cd "$repo/bench" && go build -o "$TOOLS/natsload" ./cmd/natsload) || return 1
  [ -x "$TOOLS/nats-server" ] || GOBIN=$TOOLS go install "github.com/nats-io/nats-server/v2@$NATS_VERSION" || return 1
  [ -x "$TOOLS/perf" ] || GOBIN=$TOOLS go install "github.com/apache/pulsar-client-go/perf@$PERF_VERSION" || return 1
}

# cpu_s PID: the process's user+system CPU seconds so far.
cpu_s() { awk -v t="$(getconf CLK_TCK)" '{print ($14+$15)/t}' "/proc/$1/stat"; }
# peak_rss_mib PID: the process's peak resident set (VmHWM), MiB.
peak_rss_mib() { awk '/VmHWM/{print int($2/1024)}' "/proc/$1/status"; }
# port_free PORT: true when nothing listens on 127.0.0.1:PORT.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# wait_http URL PATTERN: poll (for at most 30 s) until URL answers with a body matching PATTERN.
wait_http() {
  local i
  for i in $(seq 300); do
    curl -fs "$1" 2>/dev/null | grep -q "$2" && return 0
    sleep 0.1
  done
  echo "timed out waiting for $1" >&2; return 1
}
# stop_pid PID...: SIGTERM, then wait (at most 10 s each), then SIGKILL.
stop_pid() {
  local p i
  for p in "$@"; do
    [ -n "$p" ] || continue
    kill "$p" 2>/dev/null || continue
    for i in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
}

# start_meridian DIR BROKER_PORT WEB_PORT [ARGS...]: a standalone broker on a fresh data dir, with
# extra ARGS; sets MERIDIAN_PID.
start_meridian() {
  local dir=$1 bport=$2 wport=$3
  shift 3
  "$TOOLS/meridian" standalone --data-dir "$dir/data" --broker-addr "127.0.0.1:$bport" --web-addr "127.0.0.1:$wport" "$@" >"$dir/meridian.log" 2>&1 &
  MERIDIAN_PID=$!
  wait_http "http://127.0.0.1:$wport/admin/v2/brokers/ready" . || return 1
}

# start_nats DIR CONF [SYNC]: a nats-server from bench/nats/CONF on a fresh store; sets NATS_PID.
# SYNC=always makes JetStream fsync every write, as Meridian does by default.
start_nats() {
  local dir=$1 conf=$2 port
  mkdir -p "$dir/store"
  cp "$repo/bench/nats/accounts.conf" "$repo/bench/nats/$conf" "$dir/"
  if [ "${3:-default}" = always ]; then
    sed -i 's/^  domain: \(.*\)$/  domain: \1\n  sync_interval: always/' "$dir/$conf"
  fi
  (cd "$dir" && NATS_STORE="$dir/store" exec "$TOOLS/nats-server" -c "$conf" >"$dir/nats.log" 2>&1) &
  NATS_PID=$!
  port=$(awk -F'"' '/^http:/{split($2, a, ":"); print a[2]}' "$dir/$conf")
  wait_http "http://127.0.0.1:$port/healthz" ok
}

# nats_messages HTTP_PORT: the messages JetStream holds on that server (all streams).
nats_messages() { curl -fs "http://127.0.0.1:$1/jsz" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("messages", 0))'; }
# meridian_commits WEB_PORT: the broker's group commits so far (its storage commit histogram's count).
meridian_commits() { curl -fs "http://127.0.0.1:$1/metrics" | awk '/^meridian_storage_commit_seconds_count/ {print $2}'; }
# meridian_msg_in WEB_PORT TOPIC: the topic's msgInCounter (messages the broker stored).
meridian_msg_in() { curl -fs "http://127.0.0.1:$1/admin/v2/persistent/public/default/$2/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("msgInCounter", 0))'; }

# median_spread: reads numbers, one per line; prints "median (min-max)".
median_spread() { sort -g | awk '{v[NR]=$1} END{if (NR==0) {print "-"; exit}; m=(NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2; printf "%.2f (%.2f-%.2f)", m, v[1], v[NR]}'; }

# perf_produce SERVICE_URL TOPIC RATE SIZE: pulsar-client-go's perf producer with the batching the
# benchmarks use (1 ms, 1,000 messages, 128 KiB, one connection; BATCH_MS sets another batching
# time); RATE 0 is unthrottled. It execs the tool, so call it in the background only
# (`perf_produce ... &`: $! is the tool); run_for stops it.
perf_produce() {
  exec "$TOOLS/perf" produce "$2" --service-url "$1" --max-connections 1 --rate "$3" --size "$4" \
    --batching-time "${BATCH_MS:-1}" --batching-num-messages 1000 --batching-max-size 128 --queue-size 1000
}
# perf_consume SERVICE_URL TOPIC: an exclusive durable subscription "perf-sub" reading the topic.
perf_consume() {
  exec "$TOOLS/perf" consume "$2" --service-url "$1" --max-connections 1 --subscription perf-sub \
    --subscription-type 0 --subscription-mode 0 --receiver-queue-size 1000
}

# start_nats_pair DIR [SYNC]: the origin (domain hub) and the mirror's server (domain leaf) joined by
# a leafnode connection; sets NATS_ORIGIN_PID and NATS_MIRROR_PID.
NATS_ORIGIN=nats://acc:acc@127.0.0.1:14222
NATS_MIRROR=nats://acc:acc@127.0.0.1:14223
start_nats_pair() {
  mkdir -p "$1/origin" "$1/mirror"
  start_nats "$1/origin" origin.conf "${2:-default}" || return 1
  NATS_ORIGIN_PID=$NATS_PID
  start_nats "$1/mirror" mirror.conf "${2:-default}" || return 1
  NATS_MIRROR_PID=$NATS_PID
  wait_http http://127.0.0.1:18222/leafz '"leafnodes": 1'
}

# run_for SECS LOG CMD...: runs CMD in the background with its output in LOG for SECS seconds, then
# stops it (SIGINT, then SIGKILL after 5 s: the perf tool can hang on shutdown).
run_for() {
  local secs=$1 log=$2 p i; shift 2
  "$@" >"$log" 2>&1 &
  p=$!
  sleep "$secs"
  kill -INT "$p" 2>/dev/null
  for i in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$p" 2>/dev/null
  wait "$p" 2>/dev/null || true
}
