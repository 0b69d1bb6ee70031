#!/usr/bin/env bash
# The trainer's GPU checks in one device call: builds dflash-train and the trainer/attention GPU tests with
# tools/device/gpu_run.sh, then runs, side by side on the one GPU, the gpu-labelled tests matching REGEX (ctest -j4)
# and the tiny preset with the cached kernels (`dflash-train --preset tiny --tune-missing` plus EXTRA flags, e.g.
# `--rows pack`). Logs under $OUT; a short table last. Carry .deb (see gpu_run.sh).
#   bash tools/device/trainer_gpu_check.sh [--tests REGEX] [--tiny "EXTRA FLAGS"] [--tiny-timeout S (0: no run)]
set -uo pipefail
cd "$(dirname "$0")/../.."
tests="AttentionGpu.PackedRows|CachedKernelOpsGpu|TrainStepGpu"
tiny="--rows pack"
tiny_timeout=240
while [ $# -gt 0 ]; do
  case "$1" in
    --tests) tests="$2"; shift 2 ;;
    --tiny) tiny="$2"; shift 2 ;;
    --tiny-timeout) tiny_timeout="$2"; shift 2 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "trainer_gpu_check.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
out="${OUT:-/tmp/dflash-trainer-gpu}"
mkdir -p "$out"
bash tools/device/gpu_run.sh --no-tests \
  --targets "dflash-train test_attention_gpu test_trainer_ops_cached_kernel_gpu test_trainer_step_gpu" || exit 1
rm -rf /tmp/dflash-tiny-gpu /tmp/dflash-tiny-gpu-cache
# shellcheck disable=SC2086
[ "$tiny_timeout" -gt 0 ] && ( timeout "$tiny_timeout" build-gpu/tools/dflash_train/dflash-train --preset tiny --tune-missing $tiny \
    --output /tmp/dflash-tiny-gpu --cache-dir /tmp/dflash-tiny-gpu-cache > "$out/tiny.log" 2>&1
  echo "exit $?" >> "$out/tiny.log"
  cp /tmp/dflash-tiny-gpu/metrics.jsonl "$out/tiny_metrics.jsonl" 2>/dev/null ) &
ctest --test-dir build-gpu -L gpu -R "$tests" -j4 --output-on-failure --timeout 900 > "$out/gpu-tests.log" 2>&1
status=$?
wait
echo "== gpu tests ($tests)"
grep -E "tests passed|tests failed|Failed|\*\*\*|SKIPPED|Not Run|loss: |gradients: |peak" "$out/gpu-tests.log" | tail -30
echo "== tiny preset, cached kernels, $tiny"
grep -vE "^step [0-9]+/" "$out/tiny.log" | grep -E "kernels:|rows|start-up|eval|tau|exit|rror" | tail -14
grep -E "^step [0-9]+/" "$out/tiny.log" | tail -1
exit $status
