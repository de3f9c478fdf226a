#!/usr/bin/env bash
# Router benchmark: weir router vs HAProxy vs direct, same 90/10 split, same upstreams, one run.
#
#   bash bench/router/run.sh            # defaults below
#   DURATION=30 ROUNDS=5 CONNECTIONS=128 bash bench/router/run.sh
#
# Two nginx upstreams (v1, v2) answer a small body; HAProxy and `weir router` each split 90/10
# between them; wrk drives each target over loopback keep-alive connections, and also nginx v1
# directly as the floor. Targets are measured in interleaved rounds (direct, haproxy, weir,
# direct, ...) so drift on a shared machine hits all of them alike; the median round is reported.
# Installs haproxy, nginx and wrk from Debian packages only if they are missing.
set -euo pipefail
cd "$(dirname "$0")/../.."

DURATION=${DURATION:-15}        # seconds per measurement
WARMUP=${WARMUP:-3}             # seconds of unrecorded load before each measurement
ROUNDS=${ROUNDS:-3}
CONNECTIONS=${CONNECTIONS:-64}
WRK_THREADS=${WRK_THREADS:-2}
ROUTER_THREADS=${ROUTER_THREADS:-$(nproc)}
OUT=${OUT:-target/bench-router}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}

P_V1=18081 P_V2=18082 P_HAPROXY=18090 P_WEIR=18091 P_ADMIN=18092

missing=()
command -v haproxy >/dev/null || missing+=(haproxy)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || missing+=(nginx)
command -v wrk >/dev/null || missing+=(wrk)
if [ "${#missing[@]}" -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq haproxy nginx wrk </dev/null
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

echo "building weir (release)"
cargo build --release -q -p weir
WEIR="$CARGO_TARGET_DIR/release/weir"

rm -rf "$OUT"; mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  [ -f "$OUT/nginx.pid" ] && kill "$(cat "$OUT/nginx.pid")" 2>/dev/null || true
}
trap cleanup EXIT

# --- upstreams: one nginx, two servers, a small body each ------------------------------------
cat >"$OUT/nginx.conf" <<EOF
worker_processes 1;
pid $OUT/nginx.pid;
error_log $OUT/nginx-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  keepalive_timeout 120s;
  server { listen 127.0.0.1:$P_V1; location / { default_type text/plain; return 200 "v1 hello from the primary\n"; } }
  server { listen 127.0.0.1:$P_V2; location / { default_type text/plain; return 200 "v2 hello from the canary\n"; } }
}
EOF
"$NGINX" -c "$OUT/nginx.conf" -e "$OUT/nginx-error.log"

# --- HAProxy: the same 90/10 split ---------------------------------------------------------
cat >"$OUT/haproxy.cfg" <<EOF
global
  maxconn 4096
  nbthread $ROUTER_THREADS
defaults
  mode http
  option http-keep-alive
  option forwardfor
  timeout connect 2s
  timeout client 30s
  timeout server 30s
  http-reuse always
frontend fe
  bind 127.0.0.1:$P_HAPROXY
  default_backend split
backend split
  balance roundrobin
  server v1 127.0.0.1:$P_V1 weight 90
  server v2 127.0.0.1:$P_V2 weight 10
EOF
haproxy -f "$OUT/haproxy.cfg" -db >"$OUT/haproxy.log" 2>&1 &
pids+=($!)

# --- weir router: the same split -----------------------------------------------------------
"$WEIR" router --listen 127.0.0.1:$P_WEIR --primary http://127.0.0.1:$P_V1 --canary http://127.0.0.1:$P_V2 \
  --weight 10 --admin 127.0.0.1:$P_ADMIN --threads "$ROUTER_THREADS" >"$OUT/weir.log" 2>&1 &
WEIR_PID=$!
pids+=($WEIR_PID)

for port in $P_V1 $P_V2 $P_HAPROXY $P_WEIR; do
  for _ in $(seq 50); do curl -fsS -o /dev/null "http://127.0.0.1:$port/" 2>/dev/null && break; sleep 0.1; done
  curl -fsS -o /dev/null "http://127.0.0.1:$port/" || { echo "port $port not answering"; exit 1; }
done

declare -A URL=([direct]="http://127.0.0.1:$P_V1/" [haproxy]="http://127.0.0.1:$P_HAPROXY/" [weir]="http://127.0.0.1:$P_WEIR/")

# wrk reports latency with units; normalise to milliseconds.
to_ms() { awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n *= 1; else if (v ~ /s$/) n *= 1000; printf "%.3f", n }'; }

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq "$ROUNDS"); do
  for target in direct haproxy weir; do
    wrk -t"$WRK_THREADS" -c"$CONNECTIONS" -d"${WARMUP}s" "${URL[$target]}" >/dev/null
    wrk -t"$WRK_THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency "${URL[$target]}" >"$OUT/$target-$round.txt"
    rps=$(awk '/^Requests\/sec:/ { print $2 }' "$OUT/$target-$round.txt")
    p50=$(to_ms "$(awk '$1 == "50%" { print $2 }' "$OUT/$target-$round.txt")")
    p99=$(to_ms "$(awk '$1 == "99%" { print $2 }' "$OUT/$target-$round.txt")")
    errors=$(awk '/Non-2xx|Socket errors/ { print }' "$OUT/$target-$round.txt" | tr '\n' ' ')
    echo "$target $round $rps $p50 $p99 ${errors:-none}" | tee -a "$OUT/results.txt"
  done
done

LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
RSS_KB=$(awk '/^VmRSS:/ { print $2 }' "/proc/$WEIR_PID/status")
HWM_KB=$(awk '/^VmHWM:/ { print $2 }' "/proc/$WEIR_PID/status")
HAPROXY_RSS_KB=$(ps -o rss= -C haproxy | awk '{ s += $1 } END { print s }')
curl -fsS "http://127.0.0.1:$P_ADMIN/metrics" | grep -E '^weir_router_(requests|errors)_total' >"$OUT/weir-metrics.txt" || true

median() { sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
col() { awk -v t="$1" -v c="$2" '$1 == t { print $c }' "$OUT/results.txt" | median; }

echo
echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(free -g | awk '/Mem:/ { print $2 }') GB RAM; $(uname -sr)"
echo "versions: $(haproxy -v | head -1 | cut -d' ' -f1-3); $("$NGINX" -v 2>&1); $(wrk --version 2>&1 | head -1 | cut -d' ' -f1-2); $("$WEIR" --version)"
echo "load average (1, 5, 15 min): $LOAD_BEFORE before, $LOAD_AFTER after"
echo "load: wrk -t$WRK_THREADS -c$CONNECTIONS, ${DURATION}s per run after ${WARMUP}s warm-up, $ROUNDS interleaved rounds, medians"
echo
printf '| target | requests/s | vs HAProxy | p50 ms | p99 ms |\n|---|---:|---:|---:|---:|\n'
H_RPS=$(col haproxy 3)
for target in direct haproxy weir; do
  rps=$(col "$target" 3)
  printf '| %s | %.0f | %.2f | %s | %s |\n' "$target" "$rps" "$(awk -v a="$rps" -v b="$H_RPS" 'BEGIN { print a / b }')" "$(col "$target" 4)" "$(col "$target" 5)"
done
echo
printf 'per-round weir/HAProxy requests/s:'
for round in $(seq "$ROUNDS"); do
  awk -v r="$round" '$2 == r && $1 == "haproxy" { h = $3 } $2 == r && $1 == "weir" { w = $3 } END { printf " %.2f", w / h }' "$OUT/results.txt"
done
echo
printf 'per-round weir/HAProxy p99:'
for round in $(seq "$ROUNDS"); do
  awk -v r="$round" '$2 == r && $1 == "haproxy" { h = $5 } $2 == r && $1 == "weir" { w = $5 } END { printf " %.2f", w / h }' "$OUT/results.txt"
done
echo
echo "weir router RSS after the run: $((RSS_KB / 1024)) MB (peak $((HWM_KB / 1024)) MB); HAProxy RSS: $((HAPROXY_RSS_KB / 1024)) MB"
echo "weir split (from its admin endpoint):"; cat "$OUT/weir-metrics.txt"
echo "raw wrk output: $OUT"
