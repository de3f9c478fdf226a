#!/usr/bin/env bash
# Operator scale benchmark: N rollouts in one `weir operator` (release build) against the
# testkit's in-memory Kubernetes API server; a new revision of all N at once; tick lateness,
# memory and API requests per step (docs/BENCHMARKS.md, "Operator scale").
#
#   bash bench/operator/run.sh                                # 1,000 rollouts, 60 s interval
#   bash bench/operator/run.sh --rollouts 200 --interval 5    # a quicker look
#
# Arguments go to the harness (crates/weir/examples/operator_scale.rs): --rollouts N,
# --interval SECONDS, --steps 10,30,50, --report FILE. Needs kubectl (it applies weir's CRDs as
# a user would). The report is also written to $OUT/report.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
OUT=${OUT:-$CARGO_TARGET_DIR/bench-operator}
mkdir -p "$OUT"

echo "building weir and the harness (release)"
cargo build --release -q -p weir --bin weir --example operator_scale
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$CARGO_TARGET_DIR/release/examples/operator_scale" \
  --weir "$CARGO_TARGET_DIR/release/weir" --report "$OUT/report.md" "$@"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
