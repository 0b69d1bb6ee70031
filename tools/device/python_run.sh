#!/usr/bin/env bash
# The dflash_tune Python package on the GPU machine, in one call: installs it with the README's command into the
# machine's torch (/opt/torch/.venv), then runs its GPU tests (tests/python/gpu_test.py, on a fresh kernel cache
# that they tune as they go) and the demonstration (tools/bench/py_drafter_step.py: SpecForge's 27B drafter step,
# compiled flex vs dflash_tune, after dflash_tune.warmup of its attention keys). Logs and JSON go to $OUT.
# Carried: the git-ignored .deb/, .whl/ and .whl_py/ that tools/device/prepare_carry.sh fills here.
#   bash tools/device/python_run.sh [--parts "install tests demo"] [--tests "gpu_test.ConvTest ..."]
#                                   [--test-timeout S] [--demo-timeout S]
set -uo pipefail
cd "$(dirname "$0")/../.."
parts="install tests demo"
tests="gpu_test"
test_timeout=240
demo_timeout=300
while [ $# -gt 0 ]; do
  case "$1" in
    --parts) parts="$2"; shift 2 ;;
    --tests) tests="$2"; shift 2 ;;
    --test-timeout) test_timeout="$2"; shift 2 ;;
    --demo-timeout) demo_timeout="$2"; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "python_run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
out="${OUT:-/tmp/dflash-python-out}"
mkdir -p "$out"
export PATH=/opt/torch/.venv/bin:$PATH PYTHONUNBUFFERED=1
sysroot=/tmp/dflash-sysroot
for deb in .deb/*.deb; do dpkg -x "$deb" "$sysroot"; done
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl ||
  exit 1
export PYTHONPATH=/tmp/site
export DFLASH_CACHE_DIR=/tmp/dflash-python-cache
status=0
t0=$(date +%s)
if [[ " $parts " == *" install "* ]]; then
  sqlite_lib=$(ls /usr/lib/x86_64-linux-gnu/libsqlite3.so.0)
  # The README's install command, with the headers the machine lacks from the carried .debs.
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) python3 -m pip install --no-build-isolation --no-deps --upgrade --target /tmp/site . \
    -C cmake.define.CMAKE_PREFIX_PATH="$sysroot/usr" -C cmake.define.SQLite3_INCLUDE_DIR="$sysroot/usr/include" \
    -C cmake.define.SQLite3_LIBRARY="$sqlite_lib" -C cmake.define.CLI11_INCLUDE_DIR="$sysroot/usr/include" \
    -C build-dir=/tmp/dflash-python-build >"$out/install.log" 2>&1 || { grep -E "error|Error" "$out/install.log" | head -30; exit 1; }
  echo "install: $(( $(date +%s) - t0 )) s"
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if [[ " $parts " == *" tests "* ]]; then
  t1=$(date +%s)
  (cd tests/python && timeout "$test_timeout" python3 -m unittest -v $tests) >"$out/gpu_test.log" 2>&1 || status=1
  grep -E "^(test_|Ran |OK|FAILED)|Error|assert" "$out/gpu_test.log" | head -60
  echo "tests: $(( $(date +%s) - t1 )) s"
fi
if [[ " $parts " == *" demo "* ]]; then
  t1=$(date +%s)
  timeout "$demo_timeout" python3 tools/bench/py_drafter_step.py --wheel-dir .whl_py --out "$out" \
    >"$out/demo.log" 2>&1 || status=1
  tail -12 "$out/demo.log"
  echo "demo: $(( $(date +%s) - t1 )) s"
fi
exit $status
