#!/usr/bin/env bash
# Session 12 (gdn, issue 5) device runs on the H200, one mode per call; logs and tables go to $OUT.
#   profile: stage-time sweep of the fused path over (C, BV, warps) configs (gdn_check.py --sweep), Nsight Compute
#            of prep(fused) / fused / fused2 at two configs (1 launch each, --clock-control none), FLA 0.6.0's
#            per-kernel times on (16,48) 1x8192 (torch.profiler) and its Triton cache ($OUT/triton_cache.tgz).
#   check:   build (background), GPU correctness (gdn_check.py --quick, GdnGpu gtest), side-by-side bench
#            (gdn_bench.py: (16,48) 1x8192 with FLA, then 1x32768 with FLA, then the rest without) while time is
#            left (S12_LIMIT seconds, default 330).
#   final:   (round 2) the 4-shape side-by-side table within S12_LIMIT seconds (default 330: all 4 need that);
#            FLA's first calls for the shapes not in the carried Triton cache ((16,32), the packed one) in the
#            background from the start; build (background) + gdn_check --quick --no-timing, then the GdnGpu gtest; if either fails, the
#            committed kernels (build-gdn/dev/head_gdn.tgz, `git archive HEAD kernels/gdn tools/device/gdn_check.py`)
#            are extracted over the tree, rebuilt and re-tested, and the table is measured on them (FALLBACK line);
#            the fused stages' times (gdn_check --sweep); then gdn_bench.py shape by shape, every shape with FLA.
# Carry: .deb, .whl (FLA wheels) and, for check / final, build-gdn/dev (triton_cache.tgz from a profile run;
# head_gdn.tgz for final).
# Usage: bash tools/device/gdn_s12.sh profile | check [budget] | final
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
if [ "$mode" = final ]; then  # everything under /tmp/s12, packed into $OUT/s12_logs.tgz; the tables to $OUT
  w=/tmp/s12
  mkdir -p "$w"
  left() { echo $(( ${S12_LIMIT:-330} - ($(date +%s) - t0) )); }
  pack() {
    for f in "$w"/b*/gdn_bench.md; do [ -f "$f" ] && cp "$f" "$out/$(basename "$(dirname "$f")")_gdn_bench.md"; done
    tar -C "$w" -czf "$out/s12_logs.tgz" . 2>/dev/null
  }
  bench() {  # $1 out name, $2 shape, $3 budget
    [ "$(left)" -lt 25 ] && { el "bench $1 skipped: $(left) s left"; return; }
    el "bench shape $2 budget $3 (left $(left) s)"
    timeout "$(left)" python3 tools/bench/gdn_bench.py --build-dir build-gpu --cache-dir /tmp/c --budget "$3" \
      --reps 10 --shapes "$2" --out "$w/$1" --work-dir "/tmp/w$1" >"$w/$1.txt" 2>&1
    el "bench $1 exit $?"
    grep -E "^\| \(|warmup:" "$w/$1.txt"
    pack
  }
  build() { OUT="$w" bash tools/device/gpu_run.sh --targets "dflash-tune kernel_bench test_gdn_gpu" --no-tests \
              >"$w/build$1.txt" 2>&1; echo "build exit $?" >>"$w/build$1.txt"; tail -1 "$w/build$1.txt"; }
  gputest() {
    timeout 60 build-gpu/tests/kernels/gdn/test_gdn_gpu >"$w/gpu_test$1.txt" 2>&1
    local rc=$?
    el "GdnGpu$1 exit $rc"
    grep -E "PASSED|FAILED|Failure" "$w/gpu_test$1.txt" | head -6
    return $rc
  }
  cat >/tmp/gdn_fla_warm.py <<'PY'
# FLA's first call (Triton compile + autotune, cached in TRITON_CACHE_DIR) for (16,32) 1x8192 and the packed
# shape (seed 1's cut points, as kernel_bench --instance-only draws them), so gdn_bench's FLA side finds them.
import sys, time, types, torch
sys.path.insert(0, "tools/bench")
import gdn_bench as gb
args = types.SimpleNamespace(seed=1, graph_launches=1, warmup=0, reps=1, no_flush=True)
cu = [0]
for n in (2010, 1175, 1005, 4360, 14591, 4030, 2508, 3089):
    cu.append(cu[-1] + n)
for name, p, c in (("(16,32) 1x8192", gb.gdn_problem(16, 32, 8192), [0, 8192]),
                   ("(16,48) 8 packed", gb.gdn_problem(16, 48, 32768, 8), cu)):
    t = time.time()
    first, ms = gb.fla_time(torch, args, p, c)
    print(f"FLA warm {name}: first call {first:.1f} s, {time.time() - t:.1f} s in all, {ms:.3f} ms", flush=True)
PY
  el "FLA warm-up (background), build (background), gdn_check --quick --no-timing"
  timeout 150 python3 /tmp/gdn_fla_warm.py >"$w/fla_warm.txt" 2>&1 &
  fpid=$!
  build "" &
  bpid=$!
  OUT="$w" timeout 120 python3 tools/device/gdn_check.py --quick --no-timing >"$w/check.txt" 2>&1
  crc=$?
  el "check exit $crc"
  grep -E "FAIL|ERROR|SUMMARY" "$w/check.txt" | head -12
  grep -q "SUMMARY: \([0-9]*\)/\1 cases pass" "$w/check.txt" || crc=1
  wait "$bpid"
  gputest "" || crc=1
  if [ "$crc" != 0 ]; then
    el "FALLBACK: the new kernels failed a check; measuring the committed ones (build-gdn/dev/head_gdn.tgz)"
    tar -xzf build-gdn/dev/head_gdn.tgz
    build _head
    gputest _head
  else
    el "NEW KERNELS PASS: gdn_check --quick and GdnGpu"
  fi
  pack
  el "sweep (fused stages, (16,48) 1x8192)"
  OUT= timeout 40 python3 tools/device/gdn_check.py --sweep --cfgs "32,64,8" 2>&1 | grep "^sweep" | tee "$w/sweep.txt"
  el "FLA warm-up: waiting"
  wait "$fpid"
  cat "$w/fla_warm.txt" | grep -E "FLA warm|Error" | head -4
  bench b0 0 8
  bench b1 1 8
  bench b3 3 6
  bench b2 2 6
  el "end"
  exit 0
fi
echo "unknown mode $mode" >&2
exit 2
