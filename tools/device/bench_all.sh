#!/usr/bin/env bash
# Every side-by-side benchmark of the project, run on the GPU machine in as few device calls as the 10-minute
# limit of one call allows. Builds once per call (tools/device/gpu_run.sh, only the targets the chosen parts need),
# then runs the parts in the order given, each bounded by what is left of --deadline, and prints a short summary
# table last.
#   bash tools/device/bench_all.sh [--deadline S] [--budget N] [--rounds N] [--dry-run [--build-dir DIR]] PART...
# --rounds N (attention parts): every system timed in N rounds, ours then the references, medians shown
# (attention_bench.py --rounds; ~+20 s a round at attention-quick).
# Parts, with their time on one H200 (the build of dflash-tune + kernel_bench takes 26-34 s of it):
#   attention        tools/bench/attention_bench.py, all 7 shapes: our tuned winners vs torch.compile(flex_attention)
#                    with the same BlockMask (DFlash full / sliding, 512 and 128 anchors; the target's head-dim-256
#                    document-causal forward) and vs SDPA's flash and cuDNN backends (dense causal; head-dim-256
#                    causal forward). ~5 min for the first 5 shapes (warmup of their 10 keys ~2 min, flex's first
#                    call 5-10 s a shape), plus the two head-dim-256 forward shapes (their share not measured apart)
#   attention-quick  the same for DFlash full 512 and dense causal only (--quick). ~2.5 min; 200 s with --rounds 3
#                    on an H100 (fresh machine, build 42 s besides)
#   gdn              tools/bench/gdn_bench.py, 4 shapes: our tuned winner (sm_90a: both tiers) and the portable
#                    tier's (sm_90) vs FLA 0.6.0 chunk_gated_delta_rule, all CUDA-graph replays (--budget 12
#                    --reps 10 unless --budget). ~8 min (490 s measured): warmup ~20 s per 8192-token key and ~50 s per 32768-token key, FLA's first call (Triton compile + autotune)
#                    30-46 s a shape on a fresh machine (372 s measured in all; 259 s with FLA's Triton cache warm)
#   gdn-quick        the same for (16,48) and (16,32) 1x8192 only (--shapes 0,1). ~4 min (an H100: build 50 s,
#                    both archs' warmups 64 s, FLA's first calls 51 + 43 s)
#   step             tools/bench/train_step_bench.py (dflash-train's full-size step: a cold run that tunes the
#                    missing keys + 1 step, printing a line per key, then a warm process, ~20 s), then the Python
#                    stack's step (.whl_py/py_dflash_step.py: SpecForge + FLA + flex, ~90 s), one after the other,
#                    plus the dflash-train build with the CUDA LibTorch (~100 s, not timed alone). ~88 GiB of GPU
#                    memory each. The cold run's tuning of its 26 keys takes ~265 s (the run prints each key);
#                    when it is cut, a second `step` call on the still-warm machine (within its 30 s idle release)
#                    finds the finished keys in the kept step cache and tunes only the rest
#   launch           tools/bench/launch_bench: host microseconds per cached launch through the trainer's ops against
#                    the family's own launch call (the tiny preset's shapes, warmed first with --budget 3). ~1.5 min
# Calls that fit 10 minutes: `attention launch`, `gdn`, `step`, `attention-quick gdn-quick` (~7 min),
# `attention-quick gdn` (~9 min: tight).
# Carry (fill it here with tools/device/prepare_carry.sh): .deb for every part; .whl for gdn and step; .whl_py for
# step. Device tool: timeout_s 600 with the default --deadline 570 (seconds from this script's start after which
# no part runs on; what is left is packed and summarised).
# $OUT (default /tmp/dflash-bench-all): summary.md, logs.tgz (build and bench logs) and one folder per part with
# its table (.md) and raw JSON (.json): attention/attention_bench.*, gdn/gdn_bench.*, step/step.*, launch/launch.*.
# The device tool returns at most 8 files, i.e. 3 parts per call.
# --dry-run (the CPU machine, no GPU, no torch): no build; --build-dir (default build-bench) must hold dflash-tune
# and kernel_bench (tools/bench/README.md, "Dry runs here"); the bench scripts run with --dry-run, the Python step
# is printed, not run.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
deadline=570
budget=""
rounds=1
dry=0
build_dir=""
parts=()
while [ $# -gt 0 ]; do
  case "$1" in
    --deadline) deadline="$2"; shift 2 ;;
    --budget) budget="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --dry-run) dry=1; shift ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    -h|--help) sed -n '2,42p' "$0"; exit 0 ;;
    attention|attention-quick|gdn|gdn-quick|step|launch)
      case " ${parts[*]:-} " in *" $1 "*) ;; *) parts+=("$1") ;; esac; shift ;;
    *) echo "bench_all.sh: unknown argument $1 (parts: attention attention-quick gdn gdn-quick step launch; --help)" >&2; exit 2 ;;
  esac
done
[ ${#parts[@]} -gt 0 ] || { echo "bench_all.sh: name at least one part (attention attention-quick gdn gdn-quick step launch)" >&2; exit 2; }
has() { case " ${parts[*]} " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
if has attention && has attention-quick; then
  echo "bench_all.sh: attention already includes attention-quick's shapes; name one of them" >&2; exit 2
fi
if has gdn && has gdn-quick; then
  echo "bench_all.sh: gdn already includes gdn-quick's shapes; name one of them" >&2; exit 2
fi
has_gdn() { has gdn || has gdn-quick; }
[ ${#parts[@]} -gt 3 ] && echo "bench_all.sh: warning: ${#parts[@]} parts write $((2 + 2 * ${#parts[@]})) files; a device call returns 8 (3 parts)" >&2

out="${OUT:-/tmp/dflash-bench-all}"
work=/tmp/dflash-bench-all-work
cache=/tmp/dflash-bench-cache             # attention and gdn keys (a second call on a warm machine reuses them)
step_cache=/tmp/dflash-bench-step-cache   # empty on a fresh machine: the step's cold run measures tuning its keys
rm -rf "$work"
mkdir -p "$work" "$out"
[ -d /opt/torch/.venv/bin ] && export PATH=/opt/torch/.venv/bin:$PATH
export PYTHONUNBUFFERED=1
t0=$(date +%s)
el() { echo "[t=$(( $(date +%s) - t0 )) s] $*"; }
left() { echo $(( deadline - ($(date +%s) - t0) )); }
# One line per step of the call: name, exit status (0, a number, skipped or not-built), seconds, note.
: >"$work/status.tsv"
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$work/status.tsv"; }
pack() { tar -C "$work" --exclude='rows.jsonl' -czf "$out/logs.tgz" . 2>/dev/null; }
# Runs a command with its output in log $2, ended (with its children: timeout signals its process group) after
# $1 seconds; 124 when it was.
bounded() {
  local limit=$1 log=$2; shift 2
  [ "$limit" -gt 0 ] || return 124
  timeout -k 10 "$limit" "$@" >"$log" 2>&1
}

# What each part needs carried (the GPU machine downloads nothing).
missing=()
need() { compgen -G "$1" >/dev/null || missing+=("$1"); }  # $1: a glob
need ".deb/libsqlite3-dev_*.deb"; need ".deb/libcli11-dev_*.deb"
if has_gdn || has step; then need ".whl/flash_linear_attention-0.6.0-*.whl"; need ".whl/fla_core-0.6.0-*.whl"; fi
if has step; then need ".whl_py/specforge-0.2.0-*.whl"; need ".whl_py/dflash-0.1.0-*.whl"; need ".whl_py/py_dflash_step.py"; fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "bench_all.sh: missing ${missing[*]}: run tools/device/prepare_carry.sh on the CPU machine and carry its folders" >&2
  [ "$dry" = 1 ] || exit 2
fi

# One build for the call, only the targets the parts need.
targets=""
if has attention || has attention-quick || has_gdn; then targets="dflash-tune kernel_bench"; fi
has step && targets="$targets dflash-train"
has launch && targets="$targets dflash-tune launch_bench"
targets=$(echo "$targets" | tr ' ' '\n' | awk 'NF && !seen[$0]++' | tr '\n' ' ')
targets="${targets# }"
if [ "$dry" = 1 ]; then
  build_dir="${build_dir:-build-bench}"
  el "dry run: would build with: bash tools/device/gpu_run.sh --targets \"$targets\" --no-tests"
  if has attention || has attention-quick || has_gdn; then
    for b in "$build_dir/tools/dflash_tune/dflash-tune" "$build_dir/tools/bench/kernel_bench"; do
      [ -x "$b" ] || { echo "bench_all.sh: --dry-run needs $b (tools/bench/README.md, Dry runs here)" >&2; exit 2; }
    done
  fi
else
  build_dir=build-gpu
  el "build: $targets"
  mkdir -p "$work/build"
  OUT="$work/build" bash tools/device/gpu_run.sh --targets "$targets" --no-tests >"$work/build/gpu_run.log" 2>&1
  rc=$?
  cat "$work/build/gpu.txt" 2>/dev/null
  tail -1 "$work/build/gpu_run.log"
  record build "$rc" $(( $(date +%s) - t0 )) "$targets"
  if [ "$rc" != 0 ]; then
    tail -30 "$work/build/gpu_run.log"
    pack
    python3 tools/device/bench_report.py summary "$out" --status "$work/status.tsv"
    exit 1
  fi
  if has_gdn || has step; then
    wheels=(.whl/*.whl)
    has step && wheels+=(.whl_py/*.whl)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      "${wheels[@]}" >"$work/pip.log" 2>&1 || { cat "$work/pip.log"; echo "bench_all.sh: wheel install failed" >&2; exit 1; }
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  fi
fi
dry_arg=()
[ "$dry" = 1 ] && dry_arg=(--dry-run)

part_attention() {  # $1: attention or attention-quick
  local args=(--build-dir "$build_dir" --cache-dir "$cache" --out "$out/attention" --work-dir "$work/attention")
  [ "$1" = attention-quick ] && args+=(--quick)
  [ -n "$budget" ] && args+=(--budget "$budget")
  [ "$rounds" != 1 ] && args+=(--rounds "$rounds")
  bounded "$(( $(left) - 15 ))" "$work/$1.log" python3 tools/bench/attention_bench.py "${args[@]}" "${dry_arg[@]}"
}

part_gdn() {  # $1: gdn or gdn-quick
  local args=()
  [ "$1" = gdn-quick ] && args+=(--shapes 0,1)
  bounded "$(( $(left) - 15 ))" "$work/$1.log" python3 tools/bench/gdn_bench.py --build-dir "$build_dir" \
    --cache-dir "$cache" --out "$out/gdn" --work-dir "$work/gdn" --budget "${budget:-12}" --reps 10 \
    --portable-arch sm_90 "${args[@]}" "${dry_arg[@]}"
}

part_step() {  # dflash-train's step, then the Python stack's (it keeps ~120 s of what is left: it runs ~90 s)
  local rc rc_py
  # The step's cache is kept on a warm machine: a call whose cold run was cut short (its keys tune one by one, each
  # published whole) leaves the keys it finished, and the next call on the same machine tunes only the rest.
  mkdir -p "$work/step" "$step_cache"
  el "step: $(find "$step_cache" -maxdepth 1 -type f | wc -l) files already in $step_cache"
  bounded "$(( $(left) - 120 ))" "$work/step/train_step.log" python3 tools/bench/train_step_bench.py \
    --build-dir "$build_dir" --cache-dir "$step_cache" --work-dir "$work/step/run" --out "$work/step" \
    --profile-steps 1 "${dry_arg[@]}"
  rc=$?
  mkdir -p "$out/step"
  cp "$work/step"/profile-steps-*.json.gz "$out/step/" 2>/dev/null  # the Kineto trace of step 2 (Perfetto)
  el "step: dflash-train exit $rc"
  local py=(python3 .whl_py/py_dflash_step.py --steps 6 --warmup 1 --out "$work/step/py")
  if [ "$dry" = 1 ]; then
    echo "dry run: would run: ${py[*]}" | tee "$work/step/py_step.log"
    rc_py=0
  else
    bounded "$(( $(left) - 15 ))" "$work/step/py_step.log" "${py[@]}"
    rc_py=$?
    el "step: Python stack exit $rc_py"
  fi
  python3 tools/device/bench_report.py step --dflash-train "$work/step/train_step_bench.json" \
    --python "$work/step/py/py_step.json" --python-partial "$work/step/py/py_step.partial.json" \
    --out "$out/step" >/dev/null
  [ "$rc" = 0 ] && [ "$rc_py" = 0 ]
}

# The launch part: the tiny preset's keys (a small budget: the bench times host work, not the kernels), then
# launch_bench over them.
part_launch() {
  local bin="$build_dir/tools/bench/launch_bench"
  local launch_args=(--cache-dir "$cache")
  mkdir -p "$out/launch"
  if [ ! -x "$bin" ] && [ "$dry" = 0 ]; then
    echo "launch: not built ($bin is missing)" | tee "$out/launch/launch.md"
    return 3
  fi
  if [ "$dry" = 1 ]; then
    echo "dry run: would run: $build_dir/tools/dflash_tune/dflash-tune --cache-dir $cache warmup --preset tiny" \
         "--budget 3; $bin ${launch_args[*]}" | tee "$out/launch/launch.md"
    return 0
  fi
  bounded "$(( $(left) - 30 ))" "$work/launch_warmup.log" "$build_dir/tools/dflash_tune/dflash-tune" \
    --cache-dir "$cache" warmup --preset tiny --budget 3 || { tail -5 "$work/launch_warmup.log"; return 1; }
  bounded "$(( $(left) - 15 ))" "$work/launch.log" "$bin" "${launch_args[@]}"
  local rc=$?
  cp "$work/launch.log" "$out/launch/launch.md"
  grep '^{' "$work/launch.log" | tail -1 >"$out/launch/launch.json"
  [ -s "$out/launch/launch.json" ] || rm -f "$out/launch/launch.json"
  return $rc
}

for part in "${parts[@]}"; do
  if [ "$(left)" -lt 60 ]; then
    el "$part: skipped, $(left) s left of the deadline"
    record "$part" skipped 0 "deadline"
    continue
  fi
  el "$part: start ($(left) s left)"
  ts=$(date +%s)
  case "$part" in
    attention|attention-quick) part_attention "$part" ;;
    gdn|gdn-quick) part_gdn "$part" ;;
    step) part_step ;;
    launch) part_launch ;;
  esac
  rc=$?
  secs=$(( $(date +%s) - ts ))
  note=""
  [ "$rc" = 124 ] && note="cut at the deadline"
  [ "$part" = launch ] && [ "$rc" = 3 ] && { rc="not-built"; note="no launch_bench binary"; }
  el "$part: exit $rc, $secs s"
  record "$part" "$rc" "$secs" "$note"
  if [ "$rc" != 0 ] && [ "$rc" != not-built ]; then  # the end of the part's logs (all of them are in logs.tgz)
    case "$part" in
      step) logs=("$work/step/train_step.log" "$work/step/py_step.log") ;;
      *) logs=("$work/$part.log") ;;
    esac
    for f in "${logs[@]}"; do [ -f "$f" ] && { echo "-- end of $f"; tail -12 "$f"; }; done
  fi
  for f in "$out/${part%-quick}"/*.md; do [ -f "$f" ] && cat "$f"; done
  pack
done
# Exit 1 when a part failed, was cut or skipped; "not built" is no failure: the part's program does not exist yet.
status=0
grep -qvP '^[^\t]+\t(0|not-built)\t' "$work/status.tsv" && status=1
pack
el "summary (reference / ours above 1: ours is faster)"
python3 tools/device/bench_report.py summary "$out" --status "$work/status.tsv"
exit $status
