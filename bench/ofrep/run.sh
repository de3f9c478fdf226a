#!/usr/bin/env bash
# OFREP evaluation on `weir serve` (release build) over loopback keep-alive, measured with
# weir's own open-loop load generator (`weir load --body`: constant rate, latency without
# coordinated omission). Server and load share this machine: figures are for a 2-core box.
#
#   bash bench/ofrep/run.sh [--rate 10000] [--duration 10s] [--flags 100]
#
# Prints one JSON summary per measurement: single evaluations of one flag at --rate, bulk
# evaluations of --flags flags at a tenth of it, and the highest single rate held without drops.
set -euo pipefail
cd "$(dirname "$0")/../.."

rate=10000 duration=10s flags=100
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) rate="$2"; shift 2 ;;
    --duration) duration="$2"; shift 2 ;;
    --flags) flags="$2"; shift 2 ;;
    *) echo "unknown argument $1 (--rate N, --duration D, --flags N)" >&2; exit 2 ;;
  esac
done

cargo build --release --quiet -p weir
weir=target/release/weir
work="$(mktemp -d)"
"$weir" serve --db "$work/weir.db" --listen 127.0.0.1:0 --output json >"$work/out" 2>"$work/err" &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do
  grep -q listening "$work/out" 2>/dev/null && break
  sleep 0.1 # polling for the server's own announcement, not a synchronisation
done
api="$(sed -n 's/.*"api":"\([^"]*\)".*/\1/p' "$work/out" | head -1)"
[ -n "$api" ] || { echo "weir serve did not start: $(cat "$work/err")" >&2; exit 1; }
url="http://$api"

# $flags flags: a rule on country, then a 20/80 split by targeting key.
for i in $(seq 0 $((flags - 1))); do
  cat <<YAML
---
apiVersion: weir.dev/v1alpha1
kind: Flag
metadata: {name: flag-$i}
spec:
  variations: [{name: control, value: blue}, {name: target, value: green}]
  rules: [{clauses: [{attribute: country, op: in, values: [NZ]}], variation: target}]
  defaultStrategy: {weights: {control: 80, target: 20}}
YAML
done >"$work/flags.yaml"
"$weir" flag create -f "$work/flags.yaml" --server "$url" >/dev/null

body='{"context":{"targetingKey":"user-12345","country":"DE"}}'
load() {
  "$weir" load --target "$1" --rate "$2" --duration "$duration" --concurrency 64 \
    --body "$body" --output json
}
echo "# single evaluation of flag-42 at $rate/s"
load "$url/ofrep/v1/evaluate/flags/flag-42" "$rate"
echo "# bulk evaluation of $flags flags at $((rate / 10))/s"
load "$url/ofrep/v1/evaluate/flags" "$((rate / 10))"
echo "# single evaluation at 2x and 4x the rate (how far it goes)"
load "$url/ofrep/v1/evaluate/flags/flag-42" "$((rate * 2))"
load "$url/ofrep/v1/evaluate/flags/flag-42" "$((rate * 4))"

# Closed loop with wrk (Debian's `wrk`, when installed): what a few keep-alive clients get, and
# the latency of one evaluation without the open-loop generator's 1 ms timer in the figure.
if command -v wrk >/dev/null 2>&1; then
  lua="$work/post.lua"
  printf 'wrk.method = "POST"\nwrk.body = %s\nwrk.headers["Content-Type"] = "application/json"\n' \
    "'$body'" >"$lua"
  for connections in 1 2 16; do
    echo "# wrk, $connections connection(s), single evaluation"
    wrk -t1 -c"$connections" -d"$duration" --latency -s "$lua" "$url/ofrep/v1/evaluate/flags/flag-42" |
      grep -E "50%|90%|99%|Requests/sec"
  done
  echo "# wrk, 16 connections, bulk evaluation of $flags flags"
  wrk -t1 -c16 -d"$duration" --latency -s "$lua" "$url/ofrep/v1/evaluate/flags" |
    grep -E "50%|90%|99%|Requests/sec"
else
  echo "# wrk not installed (apt-get install wrk): closed-loop figures skipped"
fi
