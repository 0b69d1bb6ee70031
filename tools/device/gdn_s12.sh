#!/usr/bin/env bash
# Session 12 (gdn, issue 5) device runs on the H200, one mode per call; logs and tables go to $OUT.
#   profile: stage-time sweep of the fused path over (C, BV, warps) configs (gdn_check.py --sweep), Nsight Compute
#            of prep(fused) / fused / fused2 at two configs (1 launch each, --clock-control none), FLA 0.6.0's
#            per-kernel times on (16,48) 1x8192 (torch.profiler) and its Triton cache ($OUT/triton_cache.tgz).
#   check:   build (background), GPU correctness (gdn_check.py --quick, GdnGpu gtest), side-by-side bench
#            (gdn_bench.py: (16,48) 1x8192 with FLA, then 1x32768 with FLA, then the rest without) while time is
#            left (S12_LIMIT seconds, default 330).
# Carry: .deb, .whl (FLA wheels) and, for check, build-gdn/dev (triton_cache.tgz from a profile run).
# Usage: bash tools/device/gdn_s12.sh profile | check [budget]
set -uo pipefail
cd "$(dirname "$0")/../.."
mode="${1:-profile}"
out="${OUT:-/tmp/gdn-s12-out}"
mkdir -p "$out"
t0=$(date +%s)
el() { echo "[t=$(( $(date +%s) - t0 )) s] $*"; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  >/dev/null 2>&1 && export PYTHONPATH=/tmp/site
export TRITON_CACHE_DIR=/tmp/tcache FLA_DISABLE_BACKEND_DISPATCH=1 PYTHONUNBUFFERED=1
mkdir -p "$TRITON_CACHE_DIR"
[ -f build-gdn/dev/triton_cache.tgz ] && tar -C "$TRITON_CACHE_DIR" -xzf build-gdn/dev/triton_cache.tgz
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader

cat >/tmp/gdn_fla_profile.py <<'PY'
import sys, time, torch
from fla.ops.gated_delta_rule import chunk_gated_delta_rule
H, HV, T = (int(x) for x in sys.argv[1].split(","))
K = 128
g = torch.Generator(device="cuda").manual_seed(1)
rn = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=g)
q, k, v, a, b = rn(1, T, H, K), rn(1, T, H, K), rn(1, T, HV, K), rn(1, T, HV), rn(1, T, HV)
A_log = torch.empty(HV, device="cuda").uniform_(0.5, 16.0, generator=g).log()
dt_bias = torch.log(torch.expm1(torch.empty(HV, device="cuda").uniform_(-6.9, -2.3, generator=g).exp()))
call = lambda: chunk_gated_delta_rule(q, k, v, a, b, scale=K ** -0.5, output_final_state=True,
                                      use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                                      use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias)
with torch.no_grad():
    t = time.time(); call(); torch.cuda.synchronize(); print(f"FLA ({H},{HV}) 1x{T} first call {time.time() - t:.1f} s")
    for _ in range(3): call()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(10): call()
        torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=70))
PY

if [ "$mode" = profile ]; then
  el "sweep"
  OUT= timeout 110 python3 tools/device/gdn_check.py --sweep \
    --cfgs "32,64,8;32,32,8;32,32,4;32,64,4;32,16,4;64,32,4;64,32,8;64,64,8" 2>&1 | grep -v "^compiled" | tee "$out/sweep.txt"
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  el "ncu: $ncu"
  if [ -n "$ncu" ]; then
    timeout 100 "$ncu" --clock-control none --set full --import-source no -k regex:gdn_chunk -c 6 -f -o "$out/ours" \
      python3 tools/device/gdn_check.py --profile --cfgs "32,64,8;64,32,4" >"$out/ncu_run.log" 2>&1
    el "ncu exit $?"
    "$ncu" -i "$out/ours.ncu-rep" --print-details all >"$out/ncu_details.txt" 2>&1
    "$ncu" -i "$out/ours.ncu-rep" --page raw --csv >"$out/ncu_raw.csv" 2>&1
    "$ncu" -i "$out/ours.ncu-rep" --page source --print-source sass --csv >"$out/ncu_sass.csv" 2>&1
    gzip -f "$out/ncu_raw.csv" "$out/ncu_sass.csv"
    grep -E "gdn_chunk|Duration|Achieved Occupancy|Registers Per|Compute \(SM\) Throughput|Memory Throughput|Warp Cycles Per Issued|Issue Slots Busy|Theoretical Occupancy" "$out/ncu_details.txt" | head -80
  fi
  el "FLA"
  timeout 120 python3 /tmp/gdn_fla_profile.py 16,48,8192 2>&1 | tee "$out/fla_profile.txt" | tail -22
  tar -C "$TRITON_CACHE_DIR" -czf "$out/triton_cache.tgz" .
  el "end"
  exit 0
fi
if [ "$mode" = check ]; then  # everything under /tmp/s12, packed into $OUT/s12_logs.tgz; the tables to $OUT
  budget="${2:-8}"
  w=/tmp/s12
  mkdir -p "$w"
  left() { echo $(( ${S12_LIMIT:-330} - ($(date +%s) - t0) )); }
  pack() {
    for d in "$w"/b0 "$w"/b1 "$w"/b2; do [ -f "$d/gdn_bench.md" ] && cp "$d/gdn_bench.md" "$out/$(basename "$d")_gdn_bench.md"; done
    tar -C "$w" -czf "$out/s12_logs.tgz" . 2>/dev/null
  }
  bench() {  # $1 out name, $2 shapes, $3 FLA shapes
    el "bench shapes $2 (FLA: $3)"
    timeout "$(left)" python3 tools/bench/gdn_bench.py --build-dir build-gpu --cache-dir /tmp/c --budget "$budget" \
      --reps 10 --shapes "$2" --fla-shapes "$3" --out "$w/$1" --work-dir "/tmp/w$1" >"$w/$1.txt" 2>&1
    el "bench $1 exit $?"
    grep -E "^\||warmup:|: ours" "$w/$1.txt"
    pack
  }
  el "build (background) + gdn_check --quick"
  (OUT="$w" bash tools/device/gpu_run.sh --targets "dflash-tune kernel_bench test_gdn_gpu" --no-tests >"$w/build.txt" 2>&1; echo "build exit $?" >>"$w/build.txt") &
  bpid=$!
  OUT="$w" timeout 120 python3 tools/device/gdn_check.py --quick >"$w/check.txt" 2>&1
  el "check exit $?"
  grep -E "FAIL|ERROR|SUMMARY" "$w/check.txt" | head -12
  grep -E "^stages" "$w/check.txt" | cut -c1-420
  wait "$bpid"
  tail -2 "$w/build.txt"
  el "GdnGpu"
  timeout 60 build-gpu/tests/kernels/gdn/test_gdn_gpu >"$w/gpu_test.txt" 2>&1
  el "GdnGpu exit $?"
  grep -E "OK \]|FAILED|PASSED|Failure|error" "$w/gpu_test.txt" | head -8
  pack
  bench b0 0 0
  [ "$(left)" -gt 60 ] && bench b1 2 2
  [ "$(left)" -gt 60 ] && bench b2 1,3 ""
  el "end"
  exit 0
fi
echo "unknown mode $mode" >&2
exit 2
