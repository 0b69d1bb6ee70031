#!/usr/bin/env bash
# Data-parallel dflash-train on a machine of 2 or 4 GPUs (nvidia-h200-x2 / -x4; G = the GPUs nvidia-smi lists), all
# in one device call, most important first, each part bounded by `timeout` inside the budget:
#   1. build dflash-train, dflash-tune and test_dist_train (tools/device/gpu_run.sh: CUDA LibTorch, NCCL);
#   2. the training tests on the GPUs (NCCL): 2 ranks x batch 1 == 1 rank x batch 2 and resume, 2 pipelined ranks
#      == 2 serial ranks, a killed and a hung rank end the other within the timeout, the target on cuda:1 trains what
#      one GPU trains, pipelined (its default) and in series (bit-identical to each other); with 4 GPUs also two
#      pipelined pairs (--target-device-offset 2) == one pair of twice the batch, and a killed pair's rank;
#   3. the tiny preset on 2 ranks with cached kernels (--tune-missing: tuned once, the ranks agree on the entries);
#   4. `dflash-tune warmup --preset tiny --devices 0,..,G-1` into a fresh cache (one worker per GPU, no key twice);
#   5. the full-size drafter step: its keys tuned by `warmup --config ... --devices 0,..,G-1` (fresh cache), then
#      tools/bench/train_step_bench.py on that cache with --nproc-per-node 2 --target-device-offset G/2: 1 rank, 2
#      ranks (the scaling efficiency), one pair (target on cuda:G/2, cached kernels on both GPUs) pipelined and in
#      series (the pipelined step against the larger side: goal <= 1.1), and with 4 GPUs two pipelined pairs (their
#      scaling efficiency against one pair: goal >= 0.95; their log shows all ranks agreeing on every kernel).
# Logs under /tmp/dist-out, packed into $OUT/logs.tgz (the main ones also copied to $OUT), a table last.
#   bash tests/trainer/dist_gpu_check.sh [--budget-s 560]
set -uo pipefail
cd "$(dirname "$0")/../.."
budget=560
[ "${1:-}" = "--budget-s" ] && budget=$2
final_out="${OUT:-/tmp/dflash-dist-gpu}"
out=/tmp/dist-out
rm -rf "$out"
mkdir -p "$out" "$final_out"
export OUT="$out"  # gpu_run.sh and the bench write their logs there too
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$gpus" != 2 ] && [ "$gpus" != 4 ]; then
  echo "dist_gpu_check.sh: needs 2 or 4 GPUs, this machine has $gpus" >&2
  exit 2
fi
devices=$(seq -s, 0 $(( gpus - 1 )))
offset=$(( gpus / 2 ))
t0=$(date +%s)
left() { echo $(( budget - ($(date +%s) - t0) )); }
# Seconds for the next part: at most $1, and what the budget leaves after keeping $2 for the later parts.
slot() { local s=$(( $(left) - $2 )); [ "$s" -gt "$1" ] && s=$1; echo "$s"; }
bash tools/device/gpu_run.sh --targets "dflash-train dflash-tune test_dist_train" --no-tests > "$out/gpu_run.log" 2>&1
rc_build=$?
t_build=$(( $(date +%s) - t0 ))
[ "$rc_build" != 0 ] && tail -30 "$out/gpu_run.log"
bin=build-gpu/tools/dflash_train/dflash-train
tune_bin=build-gpu/tools/dflash_tune/dflash-tune
test_bin=$(find build-gpu -name test_dist_train -type f -perm -u+x | head -1)
rc_test=skipped; rc_tiny=skipped; rc_warm=skipped; rc_full_warm=skipped; rc_bench=skipped
t_test=0; t_tiny=0; t_warm=0; t_full_warm=0; t_bench=0
if [ "$rc_build" = 0 ] && [ -n "$test_bin" ]; then
  # 2. The training tests on the GPUs (reference ops, the small model).
  s=$(slot 110 250); ts=$(date +%s)
  if [ "$s" -gt 30 ]; then
    DFLASH_DIST_TEST_DEVICE=cuda timeout "$s" "$test_bin" \
      --gtest_filter='*TwoRanks*:*TwoPipelinedRanks*:*RankEnds*:*TargetOnAnotherGpu*:*Pair*' > "$out/dist_test.log" 2>&1
    rc_test=$?
  fi
  t_test=$(( $(date +%s) - ts ))
  # 3. The tiny preset on 2 ranks with cached kernels.
  s=$(slot 110 200); ts=$(date +%s)
  if [ "$s" -gt 40 ]; then
    rm -rf /tmp/dist-tiny /tmp/dist-cache-tiny
    timeout "$s" "$bin" --preset tiny --preset-samples 32 --nproc-per-node 2 --max-steps 40 --tune-missing \
      --cache-dir /tmp/dist-cache-tiny --dist-timeout 120 --output /tmp/dist-tiny > "$out/tiny.log" 2>&1
    rc_tiny=$?
  fi
  t_tiny=$(( $(date +%s) - ts ))
  # 4. The tiny warmup spread over every GPU, into a fresh cache.
  s=$(slot 60 170); ts=$(date +%s)
  if [ "$s" -gt 15 ]; then
    rm -rf /tmp/dist-cache-warm
    timeout "$s" "$tune_bin" --cache-dir /tmp/dist-cache-warm --json warmup --preset tiny --devices "$devices" \
      > "$out/warmup.json" 2> "$out/warmup.err"
    rc_warm=$?
  fi
  t_warm=$(( $(date +%s) - ts ))
  # 5. The full-size step: tune its keys over every GPU, then 1 rank, 2 ranks, the pair(s).
  cfg=/tmp/dist-full-shapes.json
  printf '{"target_config": "%s", "drafter_config": "%s", "max_length": 4096, "num_anchors": 512}\n' \
    "$PWD/setup/presets/dflash-27b.target.json" "$PWD/setup/presets/dflash-27b.drafter.json" > "$cfg"
  s=$(slot 200 60); ts=$(date +%s)
  if [ "$s" -gt 30 ]; then
    rm -rf /tmp/dist-cache-full
    timeout "$s" "$tune_bin" --cache-dir /tmp/dist-cache-full --json warmup --config "$cfg" --devices "$devices" \
      > "$out/warmup_full.json" 2> "$out/warmup_full.err"
    rc_full_warm=$?
  fi
  t_full_warm=$(( $(date +%s) - ts ))
  s=$(( $(left) - 3 )); ts=$(date +%s)
  if [ "$s" -gt 30 ]; then
    timeout "$s" python3 tools/bench/train_step_bench.py --build-dir build-gpu --cache-dir /tmp/dist-cache-full \
      --steps 6 --nproc-per-node 2 --target-device-offset "$offset" --out "$out" > "$out/bench_stdout.log" 2>&1
    rc_bench=$?
  fi
  t_bench=$(( $(date +%s) - ts ))
fi
echo "== dist tests on cuda (NCCL)"
grep -E "^\[ +(OK|FAILED) |step [0-9]:|max \|diff\||exited with|Failure|Expected|Which is" "$out/dist_test.log" \
  2>/dev/null | head -30
echo "== tiny preset (2 ranks, cached kernels)"
grep -E "data parallel|placement|tau|rror|dflash-train \[|step 40/" "$out/tiny.log" 2>/dev/null | tail -12
for w in warmup warmup_full; do
  echo "== $w --devices $devices"
  python3 - "$out/$w.json" <<'PY' 2>&1 | tail -3
import collections, json, sys
d = json.load(open(sys.argv[1]))
print({k: d[k] for k in ('devices', 'compiled', 'benchmarked', 'winners_new', 'winners_cached', 'errors', 'wall_s')})
keys = [k.get('key') for k in d['keys']]
print('keys', len(keys), 'distinct', len(set(keys)), 'per device', dict(collections.Counter(k.get('device') for k in d['keys'])))
PY
  tail -2 "$out/$w.err" 2>/dev/null
done
echo "== full-size step (train_step_bench.py)"
grep -E "^\|" "$out/bench_stdout.log" 2>/dev/null
grep -hE "same kernels" "$out"/train_step_pair_ranks.log 2>/dev/null | head -2
grep -E "rror|exit" "$out/bench_stdout.log" 2>/dev/null | head -5
printf '%-34s %s\n' "build (s)" "$t_build (rc $rc_build)" "dist tests on cuda" "rc $rc_test (${t_test} s)" \
  "tiny preset 2 ranks --tune-missing" "rc $rc_tiny (${t_tiny} s)" "warmup tiny --devices $devices" \
  "rc $rc_warm (${t_warm} s)" "warmup full-size --devices $devices" "rc $rc_full_warm (${t_full_warm} s)" \
  "train_step_bench ranks, pairs" "rc $rc_bench (${t_bench} s)" "total (s)" "$(( $(date +%s) - t0 ))"
tar czf "$final_out/logs.tgz" -C "$out" . 2>/dev/null
for f in dist_test.log tiny.log train_step_bench.json warmup_full.json; do cp "$out/$f" "$final_out/" 2>/dev/null; done
