#!/usr/bin/env bash
# What TLS costs the broker: server CPU per message at a fixed rate over pulsar+ssl:// against plaintext
# pulsar://, alternating, each run on a fresh `meridian standalone` that has both listeners; then one
# unthrottled run each with both processes' CPU per message. The CA and the broker's certificate are
# made with openssl for 127.0.0.1.
#
# usage: scripts/bench-tls.sh
# env:   RATE (20000), SIZE (1024), REPS (5 pairs), SECS (15 measured), WARMUP (3), TOOLS (bench-lib.sh)
set -uo pipefail
. "$(dirname "$0")/bench-lib.sh"
RATE=${RATE:-20000} SIZE=${SIZE:-1024} REPS=${REPS:-5} SECS=${SECS:-15} WARMUP=${WARMUP:-3}
for p in 16650 16651 18080 18443; do port_free $p || { echo "port $p is busy" >&2; exit 2; }; done
command -v openssl >/dev/null || { echo "openssl is needed" >&2; exit 2; }
bench_tools || exit 2
work=$(mktemp -d)
pids=()
trap 'stop_pid "${pids[@]}"; rm -rf "$work"' EXIT
results=$work/results

# A CA and a server certificate for 127.0.0.1.
(cd "$work" &&
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=bench-ca >/dev/null 2>&1 &&
  openssl req -newkey rsa:2048 -nodes -keyout broker.key -out broker.csr -subj /CN=127.0.0.1 >/dev/null 2>&1 &&
  printf 'subjectAltName=IP:127.0.0.1\n' > san.ext &&
  openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out broker.pem -days 2 -extfile san.ext >/dev/null 2>&1) ||
  { echo "could not make the certificates" >&2; exit 2; }
cat > "$work/broker.conf" <<CONF
brokerServicePortTls=16651
webServicePortTls=18443
tlsCertificateFilePath=$work/broker.pem
tlsKeyFilePath=$work/broker.key
tlsTrustCertsFilePath=$work/ca.pem
CONF

# run MODE RATE: one fresh broker, a producer over MODE (plain or tls); prints
# "MODE RATE server_us_per_msg msgs_per_s client_us_per_msg".
run() {
  local mode=$1 rate=$2 d url args=() prod c0 m0 c1 m1 p0 p1
  d=$(mktemp -d -p "$work")
  start_meridian "$d" 16650 18080 --config "$work/broker.conf" || { echo "meridian did not start" >&2; return 1; }
  pids+=("$MERIDIAN_PID")
  curl -fs -X PUT http://127.0.0.1:18080/admin/v2/persistent/public/default/tls-cost >/dev/null
  url=pulsar://127.0.0.1:16650
  if [ "$mode" = tls ]; then url=pulsar+ssl://127.0.0.1:16651; args=(--trust-cert-file "$work/ca.pem"); fi
  "$TOOLS/perf" produce persistent://public/default/tls-cost --service-url "$url" "${args[@]}" --max-connections 1 \
    --rate "$rate" --size "$SIZE" --batching-time 1 --batching-num-messages 1000 --batching-max-size 128 --queue-size 1000 >"$d/perf.log" 2>&1 &
  prod=$!; pids+=("$prod")
  sleep "$WARMUP"
  c0=$(cpu_s "$MERIDIAN_PID"); p0=$(cpu_s "$prod"); m0=$(meridian_msg_in 18080 tls-cost)
  sleep "$SECS"
  c1=$(cpu_s "$MERIDIAN_PID"); p1=$(cpu_s "$prod"); m1=$(meridian_msg_in 18080 tls-cost)
  stop_pid "$prod" "$MERIDIAN_PID"
  awk -v m="$mode" -v r="$rate" -v c0="$c0" -v c1="$c1" -v p0="$p0" -v p1="$p1" -v n0="$m0" -v n1="$m1" -v s="$SECS" 'BEGIN{
    n = n1 - n0; if (n < 1) { printf "%s %s 0 0 0\n", m, r; exit }
    printf "%s %s %.2f %.0f %.2f\n", m, r, (c1-c0)*1e6/n, n/s, (p1-p0)*1e6/n }'
}

echo "# TLS against plaintext, $SIZE B messages, $SECS s measured per run"
for rep in $(seq "$REPS"); do
  if [ $((rep % 2)) -eq 1 ]; then order="plain tls"; else order="tls plain"; fi
  for m in $order; do run "$m" "$RATE" >>"$results"; tail -1 "$results"; done
done
for m in plain tls; do run "$m" 0 >>"$results"; tail -1 "$results"; done
echo
echo "## server CPU per message at $RATE msg/s: median (min-max) of $REPS runs"
pm=$(awk -v r="$RATE" '$1=="plain" && $2==r {print $3}' "$results" | median_spread)
tm=$(awk -v r="$RATE" '$1=="tls" && $2==r {print $3}' "$results" | median_spread)
ratio=$(awk -v a="${tm%% *}" -v b="${pm%% *}" 'BEGIN{ if (b > 0) printf "%.2f", a/b; else print "-" }')
echo "| plaintext | TLS | TLS / plaintext |"
echo "|---|---|---|"
echo "| $pm µs | $tm µs | $ratio |"
echo
echo "## unthrottled, one run each: msg/s, server and producer CPU per message (µs)"
awk '$2==0 {printf "| %s | %s msg/s | server %s | producer %s |\n", $1, $4, $3, $5}' "$results"
