#!/usr/bin/env bash
# Acceptance check against the Flagger corpus that sits beside the project in CI
# (../shared/compat/flagger). Usage: bash .ci/compat.sh DIR
set -euo pipefail
dir="$1"
weir="${CARGO_TARGET_DIR:-target}/debug/weir"
# The test run has just built this binary; building `-p weir` alone would unify features
# differently and compile the workspace a second time (a disk CI cannot spare).
[ -x "$weir" ] || cargo build --locked -q -p weir

"$weir" validate --quiet "$dir"/canaries/*.yaml "$dir"/metric-templates/*.yaml
echo "compat: $(ls "$dir"/canaries/*.yaml | wc -l) canaries and $(ls "$dir"/metric-templates/*.yaml | wc -l) metric templates are valid"

refused=0
for fragment in "$dir"/fragments/*.yaml; do
  if errors=$("$weir" validate --quiet "$fragment" 2>&1); then
    echo "compat: $fragment was accepted, but it is a partial snippet" >&2
    exit 1
  fi
  if ! grep -q "is required" <<<"$errors"; then
    echo "compat: $fragment was refused without naming a missing field:" >&2
    echo "$errors" >&2
    exit 1
  fi
  refused=$((refused + 1))
  echo "  $(basename "$fragment"): $(grep -m1 'is required' <<<"$errors" | sed 's/^ *- //')"
done
echo "compat: all $refused fragments refused, each naming its missing field"
