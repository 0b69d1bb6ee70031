#!/usr/bin/env python3
"""Where the GPU time of a profiled training step goes: a summary of a Chrome trace written by
`dflash-train --profile-steps N` (or `tools/bench/train_step_bench.py --profile-steps N`, which gzips it).

Prints, for the GPU kernels and copies of the trace: the busy time, the idle time inside the traced window (GPU
waiting for the host), and the kernels grouped by name (or by --group class: matrix products, our cached kernels,
elementwise/reduction, copies), each with its count, total ms, share and mean us. Per step figures divide by
--steps (the number of steps in the trace).

Usage: python3 tools/bench/trace_summary.py RUN/profile-steps-2-2.json[.gz] [--steps 1] [--top 40] [--group]
"""
import argparse
import collections
import gzip
import json
import re
import sys

# Kernel-name patterns of the classes --group reports (first match wins).
CLASSES = [
    ("matrix products (cuBLAS / CUTLASS)", re.compile(r"gemm|cutlass|sm90_xmma|nvjet|cublas|Kernel2", re.I)),
    ("cached kernels: attention", re.compile(r"dflash_attn|Attn", re.I)),
    ("cached kernels: gated delta rule", re.compile(r"^gdn|gdn_", re.I)),
    ("cached kernels: conv1d", re.compile(r"conv1d", re.I)),
    ("cached kernels: rmsnorm", re.compile(r"dflash_rmsnorm", re.I)),
    ("cached kernels: xent", re.compile(r"dflash_xent", re.I)),
    ("cached kernels: rope", re.compile(r"dflash_rope", re.I)),
    ("cached kernels: swiglu", re.compile(r"dflash_swiglu", re.I)),
    ("reductions (norms, softmax, sums)", re.compile(r"reduce|softmax|norm|logsumexp|argmax", re.I)),
    ("elementwise / casts / indexing", re.compile(r"elementwise|vectorized|unrolled|copy|cat|index|gather|scatter|"
                                                  r"fill|where", re.I)),
]


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def classify(name):
    for label, pattern in CLASSES:
        if pattern.search(name):
            return label
    return "other"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, default=1, help="steps the trace holds (per-step figures divide by it)")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--group", action="store_true", help="group kernels by class instead of by name")
    a = ap.parse_args()
    events = load(a.trace).get("traceEvents", [])
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if not gpu:
        sys.exit("trace_summary: no GPU kernels in the trace (was it recorded on a GPU run?)")
    gpu.sort(key=lambda e: e["ts"])
    start, end = gpu[0]["ts"], max(e["ts"] + e["dur"] for e in gpu)
    busy, cursor = 0.0, start  # union of the kernels' intervals (streams may overlap)
    for e in gpu:
        s, t = max(e["ts"], cursor), e["ts"] + e["dur"]
        if t > s:
            busy += t - s
            cursor = t
    window = end - start
    by = collections.defaultdict(lambda: [0, 0.0])
    for e in gpu:
        key = classify(e["name"]) if a.group else e["name"]
        by[key][0] += 1
        by[key][1] += e["dur"]
    total = sum(v[1] for v in by.values())
    n = max(1, a.steps)
    print(f"GPU window {window / 1e3 / n:.1f} ms per step: busy {busy / 1e3 / n:.1f} ms, idle (waiting for the host) "
          f"{(window - busy) / 1e3 / n:.1f} ms; {len(gpu) // n} kernels and copies per step")
    print(f"\n| {'class' if a.group else 'kernel'} | count/step | ms/step | share | mean us |\n|---|---|---|---|---|")
    for key, (count, dur) in sorted(by.items(), key=lambda kv: -kv[1][1])[:a.top]:
        label = key if len(key) <= 90 else key[:87] + "..."
        print(f"| {label} | {count / n:.0f} | {dur / 1e3 / n:.2f} | {100 * dur / total:.1f}% | {dur / count:.1f} |")


if __name__ == "__main__":
    main()
