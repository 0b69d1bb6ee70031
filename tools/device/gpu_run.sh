#!/usr/bin/env bash
# Builds dflash-tune on the GPU machine and runs the `gpu`-labelled tests and the benchmarks, in one call.
# Run from the repository root through the device tool, carrying .deb (libsqlite3-dev and libcli11-dev .debs,
# fetched here with `apt-get download libsqlite3-dev libcli11-dev` into .deb/):
#   bash tools/device/gpu_run.sh [--targets "t1 t2"] [--tests REGEX] [--test-timeout S] [--no-tests] [--bench CMD]...
# --test-timeout S caps every test's timeout (DFLASH_TEST_TIMEOUT_CAP; default 0: each test's own, 600-1800 s): keep
# it short for kernels that have never run, so that one that never ends costs S seconds of the call, not all of it.
# Logs go to $OUT (when set) and a short table is printed last. The trainer (and its gpu tests) is built against the
# machine's CUDA LibTorch (/opt/torch/.venv) with -DDFLASH_TORCH_CUDA=ON.
set -uo pipefail
cd "$(dirname "$0")/../.."
tests_regex=""
run_tests=1
test_timeout=0
targets=""
benches=()
while [ $# -gt 0 ]; do
  case "$1" in
    --tests) tests_regex="$2"; shift 2 ;;
    --targets) targets="$2"; shift 2 ;;
    --test-timeout) test_timeout="$2"; shift 2 ;;
    --no-tests) run_tests=0; shift ;;
    --bench) benches+=("$2"); shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "gpu_run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
out="${OUT:-/tmp/dflash-gpu-out}"
mkdir -p "$out"
export PATH=/opt/torch/.venv/bin:$PATH
sysroot=/tmp/dflash-sysroot
if [ ! -d "$sysroot/usr/include/CLI" ]; then
  for deb in .deb/*.deb; do dpkg -x "$deb" "$sysroot"; done
fi
sqlite_lib=$(ls /usr/lib/x86_64-linux-gnu/libsqlite3.so.0 2>/dev/null || true)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$out/gpu.txt"
t0=$(date +%s)
# The trainer links the machine's CUDA LibTorch (the wheel in /opt/torch/.venv); without it, the trainer is left out.
torch_dir=/opt/torch/.venv/lib/python3.12/site-packages/torch
torch_args=(-DDFLASH_WITH_TORCH=OFF)
if [ -f "$torch_dir/lib/libtorch_cuda.so" ]; then
  torch_args=(-DDFLASH_WITH_TORCH=ON -DDFLASH_TORCH_CUDA=ON -DDFLASH_TORCH_DIR="$torch_dir")
fi
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$sysroot/usr" \
  -DSQLite3_INCLUDE_DIR="$sysroot/usr/include" -DSQLite3_LIBRARY="$sqlite_lib" \
  -DCLI11_INCLUDE_DIR="$sysroot/usr/include" -DDFLASH_TEST_TIMEOUT_CAP="$test_timeout" "${torch_args[@]}" >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
# shellcheck disable=SC2086
cmake --build build-gpu -j "$(nproc)" ${targets:+--target $targets} >"$out/build.log" 2>&1 || { grep -E "error|Error" "$out/build.log" | head -40; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
status=0
if [ "$run_tests" = 1 ]; then
  args=(-L gpu --output-on-failure)
  [ -n "$tests_regex" ] && args+=(-R "$tests_regex")
  ctest --test-dir build-gpu "${args[@]}" >"$out/gpu-tests.log" 2>&1 || status=1
  grep -E "tests passed|tests failed|Failed|\*\*\*|SKIPPED|Not Run" "$out/gpu-tests.log" | tail -40
fi
for b in "${benches[@]}"; do
  echo "== bench: $b"
  bash -c "$b" 2>&1 | tee -a "$out/bench.log" | tail -40 || status=1
done
exit $status
