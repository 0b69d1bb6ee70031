#!/usr/bin/env bash
# gdn (issue 5): checks and measures the prep / fused-pass overlap in pieces (piece_chunks 64) in one call
# (sessions 7-8; gdn NOTES "Session 8" has its results).
#   1. build dflash-tune, kernel_bench and test_gdn_gpu (gpu_run.sh, background) while FLA compiles its first
#      (16,48) 1x8192 call (the Triton cache in build-gdn/dev/triton_cache.tgz, when carried, makes that quick);
#   2. test_runtime_gpu's StreamFork tests (with GDN_FORK_OLD, the lifetime test also against that old file: it must
#      fail there), then test_gdn_gpu: every path, with 4 piece variants, against the float64 token-by-token
#      reference (7 problems, two of them with several pieces per sequence);
#   3. `dflash-tune warmup` of (16,48) 1x8192 over its whole space (--budget 36: every tuned config) and
#      `dflash-tune show` of the entry: each geometry's time with piece_chunks 0 and 64, measured by the same
#      method in the same process (the A/B of the overlap);
#   4. gdn_bench.py shape by shape, FLA side by side, while time is left (GDN_LIMIT seconds, default 330).
# Carry: .deb, .whl (the FLA wheels, DEVELOPERS.md) and build-gdn/dev when it holds triton_cache.tgz.
# Usage: bash tools/device/gdn_pieces.sh        (tables and logs under $OUT)
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/gdn-pieces-out}"
limit="${GDN_LIMIT:-330}"
source tools/device/gdn_device_env.sh  # el, left, $out, FLA wheels, Triton cache

el "build"
OUT="$out/build" bash tools/device/gpu_run.sh --targets "dflash-tune kernel_bench test_gdn_gpu test_runtime_gpu" --no-tests \
  >"$out/build.txt" 2>&1
tail -3 "$out/build.txt"
tune=build-gpu/tools/dflash_tune/dflash-tune
[ -x "$tune" ] || { el "build failed"; exit 1; }

el "StreamFork (fork / join ordering, eager and in a CUDA graph; forks of a destroyed context)"
build-gpu/tests/tuner/test_runtime_gpu --gtest_filter='*StreamFork*' >"$out/stream_fork.txt" 2>&1
echo "test_runtime_gpu StreamFork exit $?"; grep -E "OK \]|FAILED|PASSED" "$out/stream_fork.txt"
# GDN_FORK_OLD: a stream_fork.cc from before the context-lifetime fix (e.g. `git show d2ffeae:tuner/stream_fork.cc`,
# carried): the lifetime test is built and run against it once, and must fail there.
if [ -n "${GDN_FORK_OLD:-}" ] && [ -f "$GDN_FORK_OLD" ]; then
  el "StreamFork lifetime test against $GDN_FORK_OLD (expected to fail)"
  cp tuner/stream_fork.cc /tmp/stream_fork.cc.new
  trap 'cp /tmp/stream_fork.cc.new tuner/stream_fork.cc' EXIT  # the tree gets its own file back on any exit
  cp "$GDN_FORK_OLD" tuner/stream_fork.cc
  # the old file predates the destructor this header declares: give it a trivial one
  echo 'dflash::gpu::StreamFork::~StreamFork() = default;' >>tuner/stream_fork.cc
  sed -i 's/new StreamFork()/new StreamFork(ctx, 0)/' tuner/stream_fork.cc
  cmake --build build-gpu --target test_runtime_gpu >"$out/old_fork_build.txt" 2>&1 || tail -20 "$out/old_fork_build.txt"
  build-gpu/tests/tuner/test_runtime_gpu --gtest_filter='StreamForkLifetime*' 2>&1 | grep -E "Failure|Actual|Result|OK \]|FAILED|PASSED|exit" | head -8
  cp /tmp/stream_fork.cc.new tuner/stream_fork.cc
  cmake --build build-gpu --target test_runtime_gpu >/dev/null 2>&1
fi
el "test_gdn_gpu"
timeout "$(left)" build-gpu/tests/kernels/gdn/test_gdn_gpu >"$out/test_gdn_gpu.txt" 2>&1
echo "test_gdn_gpu exit $?"
grep -E "Failure|FAILED|PASSED|OK \]" "$out/test_gdn_gpu.txt" | head -20

el "A/B: warmup of (16,48) 1x8192 over the whole space"
problem='{"dtype":"bf16","head_dim":128,"heads":16,"num_seqs":1,"tokens":8192,"value_heads":48}'
timeout "$(left)" "$tune" --cache-dir /tmp/c warmup --problem "gdn=$problem" --budget 36 >"$out/warmup.txt" 2>&1
echo "warmup exit $?"
tail -4 "$out/warmup.txt"
entry=$("$tune" --cache-dir /tmp/c list 2>/dev/null | grep -m1 gdn | awk '{print $1}')
if [ -n "$entry" ]; then  # the whole table to the file (a pipe into head cut it short), the measured rows shown
  "$tune" --cache-dir /tmp/c show "$entry" >"$out/candidates.txt" 2>&1
  head -12 "$out/candidates.txt"
  grep -E " ok | failed " "$out/candidates.txt" | head -48
fi

el "side by side"
for i in 0 1 2 3; do  # gdn_bench.py's SHAPES: (16,48) 1x8192, (16,32) 1x8192, (16,48) 1x32768, 8 packed
  [ "$(left)" -gt 40 ] || { el "no time left for shape $i"; break; }
  timeout "$(left)" python3 tools/bench/gdn_bench.py --build-dir build-gpu --cache-dir /tmp/c --budget 12 \
    --reps 10 --shapes "$i" --out "$out/b$i" >>"$out/bench.txt" 2>&1
  grep -E "^\| \(|warmup:" "$out/bench.txt" | tail -2
done
el "end"
