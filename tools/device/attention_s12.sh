#!/usr/bin/env bash
# Session 6 (attention, issue 4) device runs on the H200: the causal backward against SDPA's flash backend (FA2).
#   bash tools/device/attention_s12.sh probe   # A/B timing of the 2-D dK/dV kernel (this tree vs build-attn/s12_base,
#                                              # a copy of the kernels before the session), Nsight Compute profiles
#                                              # (S12_NCU_COUNT kernels; S12_PROFILE_FA2=1 adds FA2's), then
#                                              # attention_check.py over every case; with S12_BENCH_SHAPES set it goes
#                                              # on as `bench` for those shapes
#   bash tools/device/attention_s12.sh bench   # build (gpu_run.sh), the AttentionGpu tests (S12_GPU_TESTS=1), then
#                                              # tools/bench/attention_bench.py per ";"-separated group of
#                                              # S12_BENCH_SHAPES, within S12_DEADLINE_S seconds of the start
# Carry: .deb and build-attn/s12_base (copy kernels/attention/*.cuh + attention_kernels.cu there before changing
# them; `probe` compiles both with nvcc and launches them through attention_check.py's ctypes driver). Logs go to
# $OUT (at most 8 files come back: the rest is packed into one tar.gz per mode).
set -uo pipefail
cd "$(dirname "$0")/../.."
mode="${1:-probe}"
final="${OUT:-/tmp/s12-final}"
out=/tmp/s12-out
mkdir -p "$out" "$final"
t0=$(date +%s)
el() { echo "[t=$(( $(date +%s) - t0 )) s] $*"; }
left() { echo $(( ${S12_DEADLINE_S:-320} - ($(date +%s) - t0) )); }  # seconds left of this run's budget
pack() { tar -C "$out" -czf "$final/s12_${mode}_logs.tar.gz" . 2>/dev/null; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader

if [ "$mode" = probe ]; then
  cat >/tmp/s12_probe.py <<'PY'
"""A/B of the 2-D dK/dV kernel (base = build-attn/s12_base, new = kernels/attention) on the bench shapes, plus
one launch of each for ncu (--profile)."""
import math, os, random, sys, time
import torch
sys.path.insert(0, "tools/device")
import attention_check as ac

BASE = 100  # Driver slot of the base cubins (attention_check's `ablate` key)
prof = "--profile" in sys.argv
drv = ac.Driver()
D = 128
FWD = (128, 64, 4, 2)
kv_cfgs = [(64, 128, 1), (64, 128, 2)]
want_bwd = set()
for mk in (1, 3):
    for bm, bn, st in kv_cfgs:
        want_bwd.update(ac.bwd_kernels(D, (bm, bn, st, 0, 2), mk))
want = want_bwd | {ac.fwd_kernel(D, FWD, mk) for mk in (1, 3)}
bdir = "/tmp/s12_build"
mods_file = bdir + "/mods.json"
if not os.path.exists(mods_file):
    import concurrent.futures, json, shutil
    os.makedirs(bdir + "/new", exist_ok=True)
    # The base sources sit next to its instantiation files: `#include "..."` finds them before -I kernels/attention.
    shutil.copytree("build-attn/s12_base", bdir + "/base", dirs_exist_ok=True)
    logs = {sub: open(f"{os.environ.get('S12_OUT', '/tmp')}/compile_{sub}.log", "w") for sub in ("new", "base")}
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        fn = ex.submit(ac.compile_all, want, "sm_90", bdir + "/new", logs["new"], 0, 8)
        fb = ex.submit(ac.compile_all, want_bwd, "sm_90", bdir + "/base", logs["base"], 0, 6)
        mods = [(c, n, 0) for c, n in fn.result()] + [(c, n, BASE) for c, n in fb.result()]
    json.dump(mods, open(mods_file, "w"))
import json
for cub, names, slot in json.load(open(mods_file)):
    drv.load(cub, names, slot)


def run_bwd(c, t, cfg, hg, slot):
    bm, bn, st = cfg
    drv.ablate = slot
    P = ac.AttnParams()
    ac.fill_params(c, P, t)
    ks = ac.bwd_kernels(D, (bm, bn, st, 0, 2), ac.kernel_mask(c))
    pre = (math.ceil(c.Sq / 32), c.Hq, c.B)
    drv.launch(ac.mangle(*ks[0]), pre, 128, 0, P)
    drv.launch(ac.mangle(*ks[1]), (hg, math.ceil(c.Skv / bn), c.Hkv // hg * c.B), bn // 16 * 32,
               ac.bwd2d_smem(D, bm, bn, st), P)
    drv.launch(ac.mangle(*ks[2]), pre, 128, 0, P)
    drv.ablate = 0


rng = random.Random(7)
shapes = [("causal 8192", ac.Case("causal", "causal", 1, 32, 32, 8192, 8192, D, layout="bhsd"), 4,
           4.0 * (8192 * 8193 / 2) * D * 32),
          ("dflash_full 512", ac.dflash_case("dflash", "dflash_full", 1, 32, 8, 512, 8192, D, rng), 8, None)]
rows = []
for label, c, hg_grouped, fl in shapes:
    t = ac.make_inputs(c)
    if fl is None:
        fl = 4.0 * ac.dense_pairs(c) * D * 32
    ac.run_fwd(drv, c, t, FWD)
    if prof:
        if label.startswith("causal"):
            for cfg in kv_cfgs:
                run_bwd(c, t, cfg, hg_grouped, 0)
            if os.environ.get("S12_PROFILE_FA2"):
                from torch.nn.attention import SDPBackend, sdpa_kernel
                q, k, v = (t[x + "4"].detach().clone().requires_grad_() for x in "qkv")
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                    torch.autograd.grad(o, (q, k, v), t["do4"])
            torch.cuda.synchronize()
        continue
    ref = None
    for slot in (BASE, 0):
        for cfg in kv_cfgs:
            for hg in (c.Hkv, hg_grouped):
                ac.poison(t, fwd=False)
                run_bwd(c, t, cfg, hg, slot)
                torch.cuda.synchronize()
                g = [t[x].float().clone() for x in ("dq", "dk", "dv")]
                if ref is None:
                    ref = g
                diff = max((a - b).abs().max().item() for a, b in zip(g, ref))
                nan = any(torch.isnan(a).any().item() for a in g)
                ms = ac.time_ms(lambda: run_bwd(c, t, cfg, hg, slot), reps=15)
                rows.append(f"{label:16s} {'base' if slot else 'new '} 2-D {cfg} hg {hg:2d}: {ms:.3f} ms "
                            f"{2.5 * fl / ms / 1e9:.0f} TF/s | max|grad - base st1 hg{c.Hkv}| {diff:.2e} nan {nan}")
                print(rows[-1], flush=True)
    if label.startswith("causal"):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        q, k, v = (t[x + "4"].detach().clone().requires_grad_() for x in "qkv")
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            gs = torch.autograd.grad(o, (q, k, v), t["do4"], retain_graph=True)
            tb = ac.time_ms(lambda: torch.autograd.grad(o, (q, k, v), t["do4"], retain_graph=True), reps=15)
        diff = max((a.float() - b).abs().max().item() for a, b in zip(gs, ref))
        rows.append(f"{label:16s} SDPA flash bwd: {tb:.3f} ms {2.5 * fl / tb / 1e9:.0f} TF/s | max|grad - ours| {diff:.2e}")
        print(rows[-1], flush=True)
print("\n".join(rows))
PY
  export S12_OUT="$out"
  el "A/B timing"
  PYTHONUNBUFFERED=1 timeout 120 python3 /tmp/s12_probe.py 2>&1 | tee "$out/ab.log"
  if [ "${S12_NCU_COUNT:-2}" -gt 0 ]; then
  el "ncu"
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || echo /usr/local/cuda/bin/ncu)
  PYTHONUNBUFFERED=1 timeout 90 "$NCU" --clock-control none --set full --import-source no \
    -k 'regex:AttnBwdKv2d|flash_bwd_dq_dk_dv' -c ${S12_NCU_COUNT:-2} -f -o "$out/prof" python3 /tmp/s12_probe.py --profile \
    >"$out/ncu.log" 2>&1
  el "ncu exit $?"
  tail -5 "$out/ncu.log"
  if [ -f "$out/prof.ncu-rep" ]; then
    "$NCU" -i "$out/prof.ncu-rep" --page details >"$final/details.txt" 2>&1
    "$NCU" -i "$out/prof.ncu-rep" --page raw --csv --print-metric-instances values >"$out/raw.csv" 2>&1 ||
      "$NCU" -i "$out/prof.ncu-rep" --page raw --csv >"$out/raw.csv" 2>&1
    "$NCU" -i "$out/prof.ncu-rep" --page source --csv --print-source sass >"$out/source.csv" 2>&1
    gzip -kf "$out/raw.csv"; gzip -kf "$out/source.csv"
    cp "$out/raw.csv.gz" "$out/source.csv.gz" "$final/"
    grep -E "^  [a-zA-Z_]|Duration|Registers Per|Achieved Occupancy|Dynamic Shared|Issue Slots Busy|Executed Ipc A" "$final/details.txt" | head -60
  fi
  fi
  el "attention_check.py (every case, nvcc builds)"
  PYTHONUNBUFFERED=1 timeout "${S12_CHECK_S:-100}" python3 tools/device/attention_check.py --out "$out/check" \
    >"$out/check.log" 2>&1
  el "attention_check exit $?"
  grep -E "^(PASS|FAIL)" "$out/check.log" | cut -c1-150 | sort | uniq -c | sort -rn | head -5
  grep -E "^FAIL|ALL PASS|SOME FAILED|EXCEPTION" "$out/check.log" | head -20
  pack
  [ -n "${S12_BENCH_SHAPES:-}" ] || { el "end"; exit 0; }
  mode=bench
fi

if [ "$mode" = bench ]; then
  el "build"
  OUT="$out" bash tools/device/gpu_run.sh --targets "dflash-tune kernel_bench test_attention_gpu" --no-tests ||
    { el "build failed"; pack; exit 1; }
  if [ -n "${S12_GPU_TESTS:-}" ]; then
    el "GPU tests (AttentionGpu, all)"
    timeout 120 build-gpu/tests/kernels/attention/test_attention_gpu >"$out/gpu_tests.log" 2>&1
    el "gpu tests exit $?"
    grep -E "OK \]|FAILED|PASSED" "$out/gpu_tests.log" | tail -8
  fi
  # S12_BENCH_SHAPES: groups of shapes separated by ';', one attention_bench.py run each (each writes its table:
  # a group cut short by the time limit loses only its own), sharing one kernel cache.
  rm -rf /tmp/dflash-bench-cache
  IFS=';' read -ra groups <<<"${S12_BENCH_SHAPES:-dflash_full 512,causal 8192}"
  g=0
  for shapes in "${groups[@]}"; do
    g=$((g + 1))
    [ "$(left)" -gt 45 ] || { el "bench group $g ($shapes) skipped: $(left) s left"; continue; }
    el "bench group $g: $shapes"
    PYTHONUNBUFFERED=1 timeout "$(left)" python3 tools/bench/attention_bench.py --build-dir build-gpu \
      --cache-dir /tmp/dflash-bench-cache --out "$out/bench$g" --shapes "$shapes" >"$out/bench$g.log" 2>&1
    el "bench group $g exit $?"
    grep -E "^\||warmup:" "$out/bench$g.log"
    cp "$out/bench$g/attention_bench.md" "$final/attention_bench$g.md" 2>/dev/null
    cp "$out/bench$g/attention_bench.json" "$final/attention_bench$g.json" 2>/dev/null
    cp /tmp/attention_bench_work/attention_bench.log "$out/attention_bench$g.log" 2>/dev/null
    pack
  done
  el "end"
  pack
  exit 0
fi
echo "usage: $0 probe|bench" >&2
exit 2
