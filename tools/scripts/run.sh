#!/usr/bin/env bash
# The README's main job: installs what is missing, builds, then runs dflash-tune on the embedded default problem
# set (Qwen3.6-27B target + its DFlash drafter): warmup (on a GPU: tune for it; without one: compile and prune
# every variant for sm_120), then verify-cache and stats. Cache: $DFLASH_CACHE_DIR or ~/.cache/dflash-tune.
# A second run is a pure cache hit. Then the trainer's embedded default: `dflash-train --preset tiny` into
# ${DFLASH_RUN_DIR:-runs/tiny} (its generated target and data are reused by later runs; the training starts afresh).
set -euo pipefail
cd "$(dirname "$0")/../.."
tools/scripts/install-deps.sh
tools/scripts/build.sh >/dev/null
bin="${DFLASH_BUILD_DIR:-build}/tools/dflash_tune/dflash-tune"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  "$bin" warmup "$@"
else
  echo "== no GPU here: compile-only warmup for sm_120 (timing needs an sm_120 GPU)"
  "$bin" warmup --arch sm_120 "$@"
fi
echo "== verify-cache"
"$bin" verify-cache
echo "== stats"
"$bin" stats
if [ "${DFLASH_WITH_TORCH:-ON}" != OFF ]; then
  train="${DFLASH_BUILD_DIR:-build}/tools/dflash_train/dflash-train"
  run_dir="${DFLASH_RUN_DIR:-runs/tiny}"
  rm -rf "$run_dir/checkpoints" "$run_dir/metrics.jsonl" "$run_dir/initial-drafter"
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "== dflash-train --preset tiny on the GPU (kernels from the cache, tuned first)"
    "$bin" warmup --preset tiny
    "$train" --preset tiny --output "$run_dir"
  else
    echo "== dflash-train --preset tiny on the CPU (LibTorch reference operations)"
    "$train" --preset tiny --output "$run_dir" --device cpu
  fi
fi
