#!/usr/bin/env bash
# Router benchmark: `weir router` against HAProxy and nginx as proxies, the same 90/10 split over
# the same two upstreams, in one run.
#
#   bash bench/router/run.sh                        # both tables, 5 rounds of 8 s per target
#   MODES=pinned ROUNDS=7 bash bench/router/run.sh  # only the core-for-core table
#   PERF=1 bash bench/router/run.sh                 # also CPU, syscalls and context switches per request
#   WEIR_BIN=/path/to/weir bash bench/router/run.sh # a prebuilt weir instead of building one
#   WEIR_BIN="before=/tmp/weir-a after=/tmp/weir-b" bash bench/router/run.sh
#                                                   # several weir builds, interleaved in the same rounds
#
# Two tables ("modes"):
#   pinned  core for core: every proxy runs ONE thread and is pinned to one core (PROXY_CPU, the
#           last core by default) with `taskset`; the nginx upstreams and wrk (one thread) are
#           pinned to the other core(s), so the load generator never takes the proxy's CPU.
#   all     all cores against all cores, nothing pinned: each proxy runs one thread per core and
#           shares the machine with wrk and the upstreams.
#   paired  (opt-in: MODES="pinned all paired") CPU cost per request with the machine's drift
#           cancelled: weir and a peer, one thread each, pinned to the SAME core, loaded at the same
#           time by two wrk instances, so both run in the same seconds on the same core. Each
#           one's CPU time (user + system, from /proc/PID/stat) over the measurement gives its
#           requests per CPU-second; the ratio of those is the figure. (The raw requests/s are
#           printed too, but they also depend on how the scheduler shares the core.) Latency is
#           not comparable in this mode and is not reported.
# Targets are measured in interleaved rounds (direct, haproxy, nginx, weir, direct, ...) so drift
# on a shared machine hits all of them alike. Each round gives a weir/peer ratio; the report is
# the median of those per-round ratios (and of the raw figures). `direct` is wrk straight to the
# v1 upstream: the floor of what loopback allows, not a proxy.
#
# Installs haproxy, nginx and wrk from Debian packages only if they are missing.
set -euo pipefail
cd "$(dirname "$0")/../.."

MODES=${MODES:-pinned all}
DURATION=${DURATION:-8}         # seconds per measurement
WARMUP=${WARMUP:-2}             # seconds of unrecorded load before each measurement
ROUNDS=${ROUNDS:-5}
CONNECTIONS=${CONNECTIONS:-64}
CPUS=$(nproc)
PROXY_CPU=${PROXY_CPU:-$((CPUS - 1))}
LOAD_CPUS=${LOAD_CPUS:-$(seq -s, 0 $((CPUS - 1)) | tr ',' '\n' | grep -vx "$PROXY_CPU" | paste -sd,)}
PERF=${PERF:-0}
OUT=${OUT:-target/bench-router}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}

P_V1=18081 P_V2=18082 P_HAPROXY=18090 P_NGINX=18093 P_WEIR=18100 # weir builds: 18100, 18102, ...
PEERS=(haproxy nginx)

if [ "$CPUS" -lt 2 ] && [[ " $MODES " == *" pinned "* ]]; then
  echo "the pinned table needs at least 2 cores (one for the proxy, one for the load); this machine has $CPUS" >&2
  exit 2
fi

missing=()
command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || missing+=(nginx)
command -v wrk >/dev/null || missing+=(wrk)
if [ "$PERF" = 1 ] && ! command -v perf >/dev/null; then missing+=(linux-perf); fi
if [ "${#missing[@]}" -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" </dev/null
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)

# The weir builds under test: name -> binary.
declare -A WEIR_OF=()
VARIANTS=()
if [ -n "${WEIR_BIN:-}" ]; then
  for entry in $WEIR_BIN; do
    if [[ $entry == *=* ]]; then name=${entry%%=*}; path=${entry#*=}; else name=weir; path=$entry; fi
    [ -x "$path" ] || { echo "WEIR_BIN: $path is not an executable" >&2; exit 2; }
    WEIR_OF[$name]=$path; VARIANTS+=("$name")
  done
else
  echo "building weir (release)"
  cargo build --release -q -p weir
  WEIR_OF[weir]="$CARGO_TARGET_DIR/release/weir"; VARIANTS=(weir)
fi
TARGETS=(direct haproxy nginx "${VARIANTS[@]}")

rm -rf "$OUT"; mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
pids=()
declare -A URL=() PID_OF=() ADMIN_OF=()
stop_all() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pidfile in "$OUT"/*.pid; do [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
  rm -f "$OUT"/*.pid
}
trap stop_all EXIT

wait_for() { # port
  for _ in $(seq 100); do curl -fsS -o /dev/null "http://127.0.0.1:$1/" 2>/dev/null && return 0; sleep 0.1; done
  echo "port $1 not answering" >&2; exit 1
}

# Starts the upstreams and the three proxies for one mode. $1 = threads per proxy, $2 = prefix
# that pins a proxy ("" for none), $3 = prefix that pins the load side.
start_all() {
  local threads=$1 pin_proxy=$2 pin_load=$3
  # Upstreams: one nginx, two servers, a small body each.
  cat >"$OUT/upstreams.conf" <<EOF
worker_processes 1;
pid $OUT/upstreams.pid;
error_log $OUT/upstreams-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  keepalive_timeout 120s;
  server { listen 127.0.0.1:$P_V1 reuseport; location / { default_type text/plain; return 200 "v1 hello from the primary\n"; } }
  server { listen 127.0.0.1:$P_V2 reuseport; location / { default_type text/plain; return 200 "v2 hello from the canary\n"; } }
}
EOF
  $pin_load "$NGINX" -c "$OUT/upstreams.conf" -e "$OUT/upstreams-error.log"

  # HAProxy: 90/10 by weight, keep-alive both ways.
  cat >"$OUT/haproxy.cfg" <<EOF
global
  maxconn 4096
  nbthread $threads
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
  $pin_proxy "$HAPROXY" -f "$OUT/haproxy.cfg" -db >"$OUT/haproxy.log" 2>&1 &
  pids+=($!)
  HAPROXY_PIDS=$!

  # nginx as a proxy: weighted upstream block, keep-alive connections to the upstreams.
  cat >"$OUT/nginx-proxy.conf" <<EOF
worker_processes $threads;
pid $OUT/nginx-proxy.pid;
error_log $OUT/nginx-proxy-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  keepalive_timeout 120s;
  upstream split {
    server 127.0.0.1:$P_V1 weight=9;
    server 127.0.0.1:$P_V2 weight=1;
    keepalive 128;
  }
  server {
    listen 127.0.0.1:$P_NGINX;
    location / {
      proxy_pass http://split;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
    }
  }
}
EOF
  $pin_proxy "$NGINX" -c "$OUT/nginx-proxy.conf" -e "$OUT/nginx-proxy-error.log"

  # weir router: the same split (each build on its own port, admin endpoint on the next one).
  local index=0 port
  for name in "${VARIANTS[@]}"; do
    port=$((P_WEIR + 2 * index))
    $pin_proxy "${WEIR_OF[$name]}" router --listen 127.0.0.1:$port --primary http://127.0.0.1:$P_V1 \
      --canary http://127.0.0.1:$P_V2 --weight 10 --admin 127.0.0.1:$((port + 1)) --threads "$threads" \
      >"$OUT/$name.log" 2>&1 &
    pids+=($!)
    PID_OF[$name]=$!
    URL[$name]="http://127.0.0.1:$port/"
    ADMIN_OF[$name]=$((port + 1))
    index=$((index + 1))
  done

  for port in $P_V1 $P_V2 $P_HAPROXY $P_NGINX; do wait_for "$port"; done
  for name in "${VARIANTS[@]}"; do wait_for "${URL[$name]##*:}"; done
  # The serving processes of nginx are its workers, not the master.
  NGINX_PIDS=$(pgrep -P "$(cat "$OUT/nginx-proxy.pid")" | paste -sd,)
  UPSTREAM_PIDS=$(pgrep -P "$(cat "$OUT/upstreams.pid")" | paste -sd,)
}

# wrk reports latency with units; normalise to milliseconds.
to_ms() { awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n *= 1; else if (v ~ /s$/) n *= 1000; printf "%.3f", n }'; }

# perf stat counters of a measurement, per request: CPU microseconds, syscalls, context switches.
per_request() { # perf output file, requests
  awk -F, -v n="$2" '
    $3 == "task-clock" { cpu = $1 }            # milliseconds
    $3 == "context-switches" { cs = $1 }
    $3 == "raw_syscalls:sys_enter" { sys = $1 }
    END { if (n > 0) printf "%.1f %.2f %.2f", cpu * 1000 / n, sys / n, cs / n; else print "- - -" }' "$1"
}

measure() { # mode round target url wrk-prefix wrk-threads
  local mode=$1 round=$2 target=$3 url=$4 pin_load=$5 wrk_threads=$6 pids_of="" file
  file="$OUT/$mode-$target-$round"
  $pin_load wrk -t"$wrk_threads" -c"$CONNECTIONS" -d"${WARMUP}s" "$url" >/dev/null
  case $target in
    haproxy) pids_of=$HAPROXY_PIDS ;;
    nginx) pids_of=$NGINX_PIDS ;;
    direct) pids_of=$UPSTREAM_PIDS ;;
    *) pids_of=${PID_OF[$target]} ;;
  esac
  if [ "$PERF" = 1 ]; then
    perf stat -x, -e task-clock,context-switches,raw_syscalls:sys_enter -p "$pids_of" \
      -o "$file.perf" -- sleep "$DURATION" &
    local perf_pid=$!
  fi
  $pin_load wrk -t"$wrk_threads" -c"$CONNECTIONS" -d"${DURATION}s" --latency "$url" >"$file.txt"
  [ "$PERF" = 1 ] && wait "$perf_pid"
  local rps p50 p99 requests errors counters="- - -"
  rps=$(awk '/^Requests\/sec:/ { print $2 }' "$file.txt")
  requests=$(awk '/requests in/ { print $1 }' "$file.txt")
  p50=$(to_ms "$(awk '$1 == "50%" { print $2 }' "$file.txt")")
  p99=$(to_ms "$(awk '$1 == "99%" { print $2 }' "$file.txt")")
  errors=$(awk '/Non-2xx/ { e += $NF } /Socket errors/ { gsub(/[^0-9 ]/, " "); for (i = 1; i <= NF; i++) e += $i } END { print e + 0 }' "$file.txt")
  [ "$PERF" = 1 ] && counters=$(per_request "$file.perf" "$requests")
  echo "$mode $target $round $rps $p50 $p99 $errors $counters" | tee -a "$OUT/results.txt"
}

# CPU time (user + system) of processes, in clock ticks.
cpu_ticks() { # comma-separated pids
  for pid in ${1//,/ }; do awk '{ print $14 + $15 }' "/proc/$pid/stat"; done | awk '{ s += $1 } END { print s }'
}

pids_of_target() {
  case $1 in
    haproxy) echo "$HAPROXY_PIDS" ;;
    nginx) echo "$NGINX_PIDS" ;;
    direct) echo "$UPSTREAM_PIDS" ;;
    *) echo "${PID_OF[$1]}" ;;
  esac
}

# Both at once, on the same core: "paired round weir-build peer weir-rps peer-rps
# weir-requests-per-cpu-second peer-requests-per-cpu-second ratio errors".
measure_pair() { # round weir-build peer wrk-prefix
  local round=$1 name=$2 peer=$3 pin_load=$4 a b
  a="$OUT/paired-$name-$peer-$round-$name.txt" b="$OUT/paired-$name-$peer-$round-$peer.txt"
  local other # (`wait` alone would also wait for the proxies running in the background)
  $pin_load wrk -t1 -c"$CONNECTIONS" -d"${WARMUP}s" "${URL[$name]}" >/dev/null &
  other=$!
  $pin_load wrk -t1 -c"$CONNECTIONS" -d"${WARMUP}s" "${URL[$peer]}" >/dev/null
  wait "$other"
  local pids_a pids_b ticks_a ticks_b
  pids_a=$(pids_of_target "$name") pids_b=$(pids_of_target "$peer")
  ticks_a=$(cpu_ticks "$pids_a") ticks_b=$(cpu_ticks "$pids_b")
  $pin_load wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" "${URL[$name]}" >"$a" &
  other=$!
  $pin_load wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" "${URL[$peer]}" >"$b"
  wait "$other"
  ticks_a=$(($(cpu_ticks "$pids_a") - ticks_a)) ticks_b=$(($(cpu_ticks "$pids_b") - ticks_b))
  local rps_a rps_b req_a req_b hz errors eff_a eff_b
  rps_a=$(awk '/^Requests\/sec:/ { print $2 }' "$a")
  rps_b=$(awk '/^Requests\/sec:/ { print $2 }' "$b")
  req_a=$(awk '/requests in/ { print $1 }' "$a")
  req_b=$(awk '/requests in/ { print $1 }' "$b")
  hz=$(getconf CLK_TCK)
  eff_a=$(awk -v r="$req_a" -v t="$ticks_a" -v hz="$hz" 'BEGIN { printf "%.0f", (t > 0 ? r * hz / t : 0) }')
  eff_b=$(awk -v r="$req_b" -v t="$ticks_b" -v hz="$hz" 'BEGIN { printf "%.0f", (t > 0 ? r * hz / t : 0) }')
  errors=$(cat "$a" "$b" | awk '/Non-2xx/ { e += $NF } /Socket errors/ { gsub(/[^0-9 ]/, " "); for (i = 1; i <= NF; i++) e += $i } END { print e + 0 }')
  echo "paired $round $name $peer $rps_a $rps_b $eff_a $eff_b $(awk -v a="$eff_a" -v b="$eff_b" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }') $errors" | tee -a "$OUT/pairs.txt"
}

median() { sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
col() { awk -v m="$1" -v t="$2" -v c="$3" '$1 == m && $2 == t && $c != "-" { print $c }' "$OUT/results.txt" | median; }
ratios() { # mode weir-build peer column: weir/peer per round
  awk -v m="$1" -v w="$2" -v p="$3" -v c="$4" '
    $1 == m && $2 == p { peer[$3] = $c } $1 == m && $2 == w { weir[$3] = $c }
    END { for (r in weir) if (r in peer && peer[r] > 0) printf "%d %.3f\n", r, weir[r] / peer[r] }' "$OUT/results.txt" | sort -n | awk '{ print $2 }'
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for mode in $MODES; do
  case $mode in
    pinned) threads=1; pin_proxy="taskset -c $PROXY_CPU"; pin_load="taskset -c $LOAD_CPUS"; wrk_threads=1 ;;
    all) threads=$CPUS; pin_proxy=""; pin_load=""; wrk_threads=$CPUS ;;
    paired) threads=1; pin_proxy="taskset -c $PROXY_CPU"; pin_load="taskset -c $LOAD_CPUS"; wrk_threads=1 ;;
    *) echo "unknown mode $mode: the modes are pinned, all and paired" >&2; exit 2 ;;
  esac
  echo "== $mode: proxies with $threads thread(s)${pin_proxy:+ on CPU $PROXY_CPU}, load${pin_load:+ on CPU(s) $LOAD_CPUS}"
  declare -A URL=([direct]="http://127.0.0.1:$P_V1/" [haproxy]="http://127.0.0.1:$P_HAPROXY/"
    [nginx]="http://127.0.0.1:$P_NGINX/") PID_OF=() ADMIN_OF=()
  start_all "$threads" "$pin_proxy" "$pin_load"
  for round in $(seq "$ROUNDS"); do
    if [ "$mode" = paired ]; then
      for name in "${VARIANTS[@]}"; do
        for peer in "${PEERS[@]}"; do measure_pair "$round" "$name" "$peer" "$pin_load"; done
      done
      continue
    fi
    for target in "${TARGETS[@]}"; do
      measure "$mode" "$round" "$target" "${URL[$target]}" "$pin_load" "$wrk_threads"
    done
  done
  rss=$(awk '/^VmRSS:/ { print int($2 / 1024) }' "/proc/$HAPROXY_PIDS/status")
  echo "$mode HAProxy $rss" >>"$OUT/rss.txt"
  rss=$(for pid in ${NGINX_PIDS//,/ }; do awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status"; done | awk '{ s += $1 } END { print int(s / 1024) }')
  echo "$mode nginx $rss" >>"$OUT/rss.txt"
  for name in "${VARIANTS[@]}"; do
    echo "$mode $name $(awk '/^VmRSS:/ { print int($2 / 1024) }' "/proc/${PID_OF[$name]}/status")" >>"$OUT/rss.txt"
    curl -fsS "http://127.0.0.1:${ADMIN_OF[$name]}/metrics" | grep -E '^weir_router_(requests|errors)_total' >"$OUT/$mode-$name-metrics.txt" || true
  done
  stop_all
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

echo
echo "machine: $CPUS cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(free -g | awk '/Mem:/ { print $2 }') GB RAM; $(uname -sr)"
echo "versions: $("$HAPROXY" -v | head -1 | cut -d' ' -f1-3); $("$NGINX" -v 2>&1); $(wrk --version 2>&1 | head -1 | cut -d' ' -f1-2); $("${WEIR_OF[${VARIANTS[0]}]}" --version)"
for name in "${VARIANTS[@]}"; do echo "weir build $name: ${WEIR_OF[$name]}"; done
echo "load average (1, 5, 15 min): $LOAD_BEFORE before, $LOAD_AFTER after"
echo "load: wrk -c$CONNECTIONS, ${DURATION}s per measurement after ${WARMUP}s warm-up, $ROUNDS interleaved rounds; medians"
for mode in $MODES; do
  echo
  case $mode in
    pinned) echo "### pinned: one thread per proxy on CPU $PROXY_CPU; upstreams and wrk -t1 on CPU(s) $LOAD_CPUS" ;;
    all) echo "### all cores: $CPUS threads per proxy, wrk -t$CPUS, nothing pinned" ;;
    paired)
      echo "### paired: weir and a peer on CPU $PROXY_CPU at the same time (one thread each); two wrk -t1 on CPU(s) $LOAD_CPUS"
      echo
      printf '| weir build | peer | weir req/CPU-s | peer req/CPU-s | ratio (median of rounds) | per round | errors |\n|---|---|---:|---:|---:|---|---:|\n'
      for name in "${VARIANTS[@]}"; do
        for peer in "${PEERS[@]}"; do
          pick() { awk -v w="$name" -v p="$peer" -v c="$1" '$3 == w && $4 == p { print $c }' "$OUT/pairs.txt"; }
          printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$name" "$peer" "$(pick 7 | median)" "$(pick 8 | median)" \
            "$(pick 9 | median)" "$(pick 9 | paste -sd' ')" "$(pick 10 | awk '{ e += $1 } END { print e + 0 }')"
        done
      done
      continue ;;
  esac
  echo
  if [ "$PERF" = 1 ]; then
    printf '| target | requests/s | p50 ms | p99 ms | errors | CPU us/req | syscalls/req | switches/req |\n|---|---:|---:|---:|---:|---:|---:|---:|\n'
  else
    printf '| target | requests/s | p50 ms | p99 ms | errors |\n|---|---:|---:|---:|---:|\n'
  fi
  for target in "${TARGETS[@]}"; do
    errors=$(awk -v m="$mode" -v t="$target" '$1 == m && $2 == t { e += $7 } END { print e + 0 }' "$OUT/results.txt")
    printf '| %s | %.0f | %s | %s | %s' "$target" "$(col "$mode" "$target" 4)" "$(col "$mode" "$target" 5)" "$(col "$mode" "$target" 6)" "$errors"
    [ "$PERF" = 1 ] && printf ' | %s | %s | %s' "$(col "$mode" "$target" 8)" "$(col "$mode" "$target" 9)" "$(col "$mode" "$target" 10)"
    printf ' |\n'
  done
  echo
  for name in "${VARIANTS[@]}"; do
    for peer in "${PEERS[@]}" "${VARIANTS[@]}"; do
      [ "$peer" = "$name" ] && continue
      for metric in "requests/s:4" "p99:6"; do
        label=${metric%%:*}; column=${metric##*:}
        per_round=$(ratios "$mode" "$name" "$peer" "$column" | paste -sd' ')
        printf '%s/%s %s per round: %s; median %s\n' "$name" "$peer" "$label" "$per_round" "$(ratios "$mode" "$name" "$peer" "$column" | median)"
      done
    done
  done
  echo "RSS after the rounds (MB): $(grep "^$mode " "$OUT/rss.txt" | cut -d' ' -f2- | paste -sd,)"
  for name in "${VARIANTS[@]}"; do
    echo "$name's own counters:"; sed 's/^/  /' "$OUT/$mode-$name-metrics.txt"
  done
done
echo
echo "raw wrk output: $OUT"
