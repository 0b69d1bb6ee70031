#!/usr/bin/env bash
# gdn (issue 5), session 8's static SASS changes to gdn_chunk_fused (branch gdn-sass; gdn NOTES "Session 8
# (static, no GPU)"): correctness first, then an A/B of the fused loop against the base kernels in one call.
#   1. gdn_check.py --quick --no-timing: every path (fused 1 and 2 stages included) against the float64
#      token-by-token reference, NEW kernels; build of test_gdn_gpu + dflash-tune in the background meanwhile;
#   2. test_gdn_gpu (the C++ path, pieces included);
#   3. A/B, same process kind, alternating base / new twice: gdn_check.py --sweep (prep(fused), fused 1 stage,
#      fused 2 stages at (16,48) 1x8192) for C32/BV64/W8 and C32/BV32/W8, base = GDN_KDIR=build-gdn/s8_base;
#   4. while time is left (GDN_LIMIT seconds, default 300): gdn_bench.py shape 0 ((16,48) 1x8192, FLA beside).
# Before the call (CPU): mkdir -p build-gdn/s8_base && git archive 23a0796 kernels/gdn | tar -x -C build-gdn/s8_base
#   --strip-components=2      (the base kernels: gdn_kernels.cu and the headers directly in build-gdn/s8_base)
# Carry: .deb, .whl (FLA / CuPy wheels), the GDN_PROBES dirs and build-gdn/s8_base (build-gdn/dev too when it holds triton_cache.tgz).
# Usage: bash tools/device/gdn_s8_sass.sh        (logs under $OUT)
# Session 9: GDN_BASE=dir (base kernels, + that commit's gdn_check.py when the launch signatures changed),
# GDN_SHAPES=0,1,2,3 (gdn_bench.py shapes), GDN_PROBES (below).
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/gdn-s8-out}"
limit="${GDN_LIMIT:-300}"
source tools/device/gdn_device_env.sh  # el, left, $out, FLA wheels, Triton cache
# The base side of the A/B (session 9): GDN_BASE (default build-gdn/s8_base) holds the base kernels; when their
# launch signatures differ from the tree's, GDN_BASE/gdn_check.py (the base commit's script) drives them.
base="${GDN_BASE:-build-gdn/s8_base}"
base_check=tools/device/gdn_check.py
[ -f "$base/gdn_check.py" ] && base_check="$base/gdn_check.py"
[ -f "$base/gdn_kernels.cu" ] || { el "$base/gdn_kernels.cu missing (see the header)"; exit 1; }

el "build (background) + gdn_check --quick --no-timing (new kernels)"
(OUT="$out/build" bash tools/device/gpu_run.sh --targets "dflash-tune kernel_bench test_gdn_gpu" --no-tests \
  >"$out/build.txt" 2>&1) &
build_pid=$!
timeout 150 python3 tools/device/gdn_check.py --quick --no-timing >"$out/check.txt" 2>&1
echo "gdn_check exit $?"; grep -ciE "fail|mismatch" "$out/check.txt"; tail -4 "$out/check.txt"
wait "$build_pid"
el "test_gdn_gpu"
timeout 120 build-gpu/tests/kernels/gdn/test_gdn_gpu >"$out/test_gdn_gpu.txt" 2>&1
echo "test_gdn_gpu exit $?"; grep -E "FAILED|PASSED" "$out/test_gdn_gpu.txt" | head -8

el "A/B sweep, base ($base) / new, twice"
for round in 1 2; do
  for side in base new; do
    if [ "$side" = base ]; then kdir="$base" check="$base_check"; else kdir=kernels/gdn check=tools/device/gdn_check.py; fi
    echo "--- round $round $side"
    OUT= GDN_KDIR="$kdir" timeout 120 python3 "$check" --sweep --cfgs "32,64,8;32,32,8" 2>&1 |
      grep -v "^compiled" | tee -a "$out/ab_sweep.txt"
  done
done
# Probes (session 9): copies of kernels/gdn whose fused pass loads differently, timed like the A/B above, to
# separate the chunk chain's own latency from its memory traffic (GDN_PROBES="dir ..."; e.g. build-gdn/s9_l2res:
# every chunk loads the segment's first chunk, so the operands come from L2; build-gdn/s9_noload: no loads after
# the first chunk). Their outputs are wrong by construction: timing only.
for kdir in ${GDN_PROBES:-}; do
  echo "--- probe $kdir"
  OUT= GDN_KDIR="$kdir" timeout 120 python3 tools/device/gdn_check.py --sweep --cfgs "32,64,8" 2>&1 |
    grep -v "^compiled" | tee -a "$out/probes.txt"
done
el "side by side, shapes ${GDN_SHAPES:-0} (0: (16,48) 1x8192)"
if [ "$(left)" -gt 60 ]; then
  timeout "$(left)" python3 tools/bench/gdn_bench.py --build-dir build-gpu --cache-dir /tmp/c --budget 12 --reps 10 \
    --shapes "${GDN_SHAPES:-0}" --out "$out/b0" >>"$out/bench.txt" 2>&1
  grep -E "^\| \(|warmup:" "$out/bench.txt" | tail -12
fi
el "end"
