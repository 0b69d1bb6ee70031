#!/usr/bin/env python3
"""Which tensor instructions the references of the attention benchmark use on this GPU, and what they cost.

The attention and gdn families are portable: mma.sync / ldmatrix / cp.async only (kernels.md), so their ceiling
is what tools/bench/mma_sync_peak.cu measures. This script reports the other side on the same machine:
  1. cuBLAS's bf16 GEMM (8192^3; wgmma on Hopper): the GPU's tensor ceiling for a kernel that may use wgmma;
  2. torch.compile(flex_attention) forward + backward with a block mask: the Triton kernels it generates, and for
     each one how many wgmma (Hopper warp-group MMA) and mma.sync instructions its PTX holds.
Reads nothing of the repo; writes only under --work. Run on the device machine:
  python3 tools/bench/isa_ceiling.py [--work /tmp/isa_ceiling]
"""
import argparse
import os
import pathlib
import re
import shutil
import sys


def gemm_tflops(torch, n=8192, reps=20):
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        a @ b
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return 2.0 * n ** 3 / (times[len(times) // 2] * 1e-3) / 1e12


def run_flex(torch, seq=4096, hq=32, hkv=8, d=128):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def causal(b, h, q, kv):
        return q >= kv

    bm = create_block_mask(causal, 1, None, seq, seq, device="cuda")
    q = torch.randn(1, hq, seq, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(1, hkv, seq, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(1, hkv, seq, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    fa = torch.compile(flex_attention, dynamic=False)
    out = fa(q, k, v, block_mask=bm, enable_gqa=True)
    out.backward(torch.randn_like(out))
    torch.cuda.synchronize()


def count_ptx(roots):
    rows = []
    for root in roots:
        for path in pathlib.Path(root).rglob("*.ptx"):
            text = path.read_text(errors="replace")
            entry = re.search(r"\.entry\s+(\w+)", text)
            rows.append((entry.group(1) if entry else path.name, len(re.findall(r"wgmma\.mma_async", text)),
                         len(re.findall(r"\bmma\.sync", text))))
    return sorted(set(rows))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="/tmp/isa_ceiling", help="fresh Triton / Inductor cache dirs go here")
    args = ap.parse_args()
    work = pathlib.Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    os.environ["TRITON_CACHE_DIR"] = str(work / "triton")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(work / "inductor")
    import torch  # after the cache variables, so every kernel is compiled into them

    if not torch.cuda.is_available():
        sys.exit("isa_ceiling: no CUDA device")
    print(f"GPU: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    print(f"cuBLAS bf16 GEMM 8192^3: {gemm_tflops(torch):.1f} TFLOP/s")
    run_flex(torch)
    rows = count_ptx([work])
    if not rows:
        sys.exit("isa_ceiling: no PTX found under " + str(work) + " (did Inductor compile elsewhere?)")
    print("torch.compile(flex_attention) fwd + bwd (causal block mask, 32/8 heads, S 4096, D 128): Triton kernels")
    print(f"  {'kernel':60s} {'wgmma':>6s} {'mma.sync':>9s}")
    for name, wg, ms in rows:
        print(f"  {name[:60]:60s} {wg:6d} {ms:9d}")


if __name__ == "__main__":
    main()
