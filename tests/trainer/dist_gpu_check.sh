#!/usr/bin/env bash
# Data-parallel dflash-train on a 2-GPU machine (nvidia-h200-x2), all in one device call: builds dflash-train and
# test_dist_train with tools/device/gpu_run.sh (CUDA LibTorch, NCCL), runs the training tests on the GPUs (2 ranks x
# batch 1 == 1 rank x batch 2, resume, a killed or hung rank ends the other),
# `dflash-tune warmup --preset tiny --devices 0,1` (one worker per GPU, no key twice) and the tiny preset on 2 ranks
# with the cached kernels (--tune-missing: tuned once, the ranks agree on the entries), as far as the time budget
# allows. Logs under $OUT, a table last.
#   bash tests/trainer/dist_gpu_check.sh [--budget-s 190]
set -uo pipefail
cd "$(dirname "$0")/../.."
budget=190
[ "${1:-}" = "--budget-s" ] && budget=$2
out="${OUT:-/tmp/dflash-dist-gpu}"
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
t0=$(date +%s)
left() { echo $(( budget - ($(date +%s) - t0) )); }
bash tools/device/gpu_run.sh --targets "dflash-train dflash-tune test_dist_train" --no-tests > "$out/gpu_run.log" 2>&1
rc_build=$?
t_build=$(( $(date +%s) - t0 ))
[ "$rc_build" != 0 ] && tail -30 "$out/gpu_run.log"
grep -h "c10d backends" "$out/configure.log" build-gpu/CMakeCache.txt 2>/dev/null | head -2
bin=build-gpu/tools/dflash_train/dflash-train
[ -x "$bin" ] || bin=$(find build-gpu -name dflash-train -type f -perm -u+x | head -1)
test_bin=$(find build-gpu -name test_dist_train -type f -perm -u+x | head -1)
tune_bin=$(find build-gpu -name dflash-tune -type f -perm -u+x | head -1)
rc_test=skipped; rc_tiny=skipped; rc_warm=skipped
if [ "$rc_build" = 0 ] && [ -n "$test_bin" ]; then
  # Most important first: the training tests on the GPUs, then the tiny preset, then the multi-GPU warmup.
  s=$(( $(left) - 15 )); [ $s -gt 90 ] && s=90
  if [ $s -gt 20 ]; then
    DFLASH_DIST_TEST_DEVICE=cuda timeout $s "$test_bin" --gtest_filter='*TwoRanks*:*RankEnds*' \
      > "$out/dist_test.log" 2>&1
    rc_test=$?
  fi
  s=$(( $(left) - 5 ))
  if [ $s -gt 25 ]; then
    kernels=(--kernels reference); [ $s -gt 100 ] && kernels=(--tune-missing)
    rm -rf /tmp/dist-tiny
    timeout $s "$bin" --preset tiny --preset-samples 32 --nproc-per-node 2 --max-steps 40 "${kernels[@]}" \
      --dist-timeout 120 --output /tmp/dist-tiny > "$out/tiny.log" 2>&1
    rc_tiny="$? (${kernels[*]})"
    cp /tmp/dist-tiny/metrics.jsonl "$out/tiny_metrics.jsonl" 2>/dev/null
  fi
  s=$(( $(left) - 3 ))
  if [ $s -gt 15 ]; then
    timeout $s "$tune_bin" --json warmup --preset tiny --devices 0,1 > "$out/warmup.json" 2> /tmp/dist-warmup.err
    rc_warm=$?
  fi
fi
echo "== dist tests"
grep -E "^\[ +(OK|FAILED) |step [0-9]:|max \|diff\||exited with|Failure|Expected|Which is" "$out/dist_test.log" \
  2>/dev/null | head -30
echo "== warmup --devices 0,1"
python3 - "$out/warmup.json" <<'PY' 2>&1 | tail -2
import json, sys
d = json.load(open(sys.argv[1]))
print({k: d[k] for k in ('devices', 'compiled', 'benchmarked', 'winners_new', 'winners_cached', 'errors', 'wall_s')})
print('keys', len(d['keys']), 'distinct', len({k.get('key') for k in d['keys']}))
PY
tail -3 /tmp/dist-warmup.err 2>/dev/null
echo "== tiny preset (2 ranks)"
grep -E "data parallel|kernels:|tau|error|rank|step 40/" "$out/tiny.log" 2>/dev/null | tail -15
printf '%-28s %s\n' "build (s)" "$t_build (rc $rc_build)" "warmup --devices 0,1" "$rc_warm" \
  "dist tests on cuda" "$rc_test" "tiny preset 2 ranks" "$rc_tiny" "total (s)" "$(( $(date +%s) - t0 ))"
