#!/usr/bin/env python3
"""Side-by-side attention benchmark on the GPU machine, one run, one GPU: this family's TUNED WINNER (read
from the kernel cache by kernel_bench) vs torch.compile(flex_attention) with the equivalent BlockMask
(create_block_mask) for the DFlash layers, and vs SDPA's flash backend for dense causal.

Steps: (1) `dflash-tune warmup --problem attention_fwd=... --problem attention_bwd=...` for every shape into
--cache-dir (a no-op for keys already cached); (2) `kernel_bench` per shape and direction (our winner, timed with
tuner::Measure: warm-up, CUDA events, L2 flushed before each launch, median); (3) flex / SDPA in this process with
the same protocol (warm-up, L2 flush, CUDA events, median of --reps).

Shapes (../shared/spec/anchors.md): DFlash full and sliding (window 2048) layers with 512 anchors (Q 8192, KV 16384)
and 128 anchors (Q 2048, KV 10240), context 8192, 32/8 heads, head dim 128, block 16; dense causal B 1, H 32, S 8192,
D 128; and the target's own attention forward (Qwen3.6-27B: 24 / 4 heads, head dim 256; forward only, the
backward has head dims 64 and 128) at 4096 tokens, causal and document-causal (8 documents, the boundaries our
workload drew with --seed, as the trainer's packed rows are tuned), vs SDPA's flash and cuDNN backends (causal)
and flex (document-causal). The DFlash anchors are the ones our workload drew (kernel_bench --instance-out, same --seed), so flex runs
exactly the same mask and every system's FLOPs count the same attended pairs: 4 * pairs * D * Hq forward, 2.5x that
backward (dense causal: S(S+1)/2 pairs).
Peak memory: extra device memory of forward + backward beyond the inputs (q, k, v, dO). Flex / SDPA: torch
allocator peak minus the inputs. Ours: cuMemGetInfo difference across the backward workload's creation and first
run (o, lse, dq, dk, dv, workspace; cuMemGetInfo counts whole pages, so ~2 MiB granularity) minus the inputs.

sm_120 stand-in (--sm80-peers; no sm_120 GPU is at hand): flex compiled for the mma.sync instruction set that
sm_120 has, in a child process with TRITON_OVERRIDE_ARCH=sm80 and torch.cuda.get_device_capability reported as
(8, 0) to Inductor's flex configuration heuristics (so flex picks its own sm_80 configurations, not Hopper's), its Triton cache in a fresh
directory whose PTX is counted (wgmma vs mma.sync: the row says what ran); SDPA flash (FlashAttention-2, mma.sync
code) for causal. Our side of that table: the portable tier's winners (--portable-arch sm_90).

Usage (GPU machine, from the repository root; see tools/bench/README.md):
  python3 tools/bench/attention_bench.py --build-dir build-gpu --cache-dir /tmp/dflash-bench-cache [--quick]
Dry run (no torch, no GPU: prints the commands, checks the shapes, the instance facts and the pair counts):
  python3 tools/bench/attention_bench.py --build-dir build-bench --dry-run
"""
import argparse
import json
import os
import statistics
import sys
import time

from bench_common import kernel_bench_json, log_line, pjson, run_cmd

GiB = float(2 ** 30)


def dflash_problem(mask, anchors, ctx=8192, hq=32, hkv=8, d=128, bs=16, window=2048):
    p = {"mask": mask, "batch": 1, "heads_q": hq, "heads_kv": hkv, "head_dim": d, "seq_q": anchors * bs,
         "seq_kv": ctx + anchors * bs, "block_size": bs, "ctx_len": ctx, "dtype": "bf16"}
    if mask == "dflash_sliding":
        p["window"] = window
    return p


SHAPES = [
    ("dflash_full 512", dflash_problem("dflash_full", 512)),
    ("dflash_sliding 512", dflash_problem("dflash_sliding", 512)),
    ("dflash_full 128", dflash_problem("dflash_full", 128)),
    ("dflash_sliding 128", dflash_problem("dflash_sliding", 128)),
    ("causal 8192", {"mask": "causal", "batch": 1, "heads_q": 32, "heads_kv": 32, "head_dim": 128, "seq_q": 8192,
                     "seq_kv": 8192, "dtype": "bf16"}),
    ("causal d256 4096", {"mask": "causal", "batch": 1, "heads_q": 24, "heads_kv": 4, "head_dim": 256,
                          "seq_q": 4096, "seq_kv": 4096, "dtype": "bf16"}),
    ("doc_causal d256 4096", {"mask": "doc_causal", "batch": 1, "heads_q": 24, "heads_kv": 4, "head_dim": 256,
                              "seq_q": 4096, "seq_kv": 4096, "num_docs": 8, "dtype": "bf16"}),
]
QUICK = ("dflash_full 512", "causal 8192")


def forward_only(p):
    """Head dim 256 (the target's attention) has a forward only."""
    return p["head_dim"] == 256


def is_dflash(p):
    return p["mask"].startswith("dflash")


# ---------------------------------------------------------------------------------------------------- our side

def warmup_cmd(args, shapes, arch=None):
    cmd = [args.dflash_tune, "--cache-dir", args.cache_dir, "warmup"] + (["--arch", arch] if arch else [])
    for _, p in shapes:
        cmd += ["--problem", "attention_fwd=" + pjson(p)]
        if not forward_only(p):
            cmd += ["--problem", "attention_bwd=" + pjson(p)]
    if args.budget:
        cmd += ["--budget", args.budget]
    return cmd


def kernel_bench_cmd(args, family, problem, extra=()):
    return [args.kernel_bench, "--family", family, "--problem", pjson(problem), "--cache-dir", args.cache_dir,
            "--seed", str(args.seed), "--warmup", str(args.warmup), "--reps", str(args.reps)] + list(extra)


def run_kernel_bench(args, family, problem, log, extra=()):
    """The JSON line of kernel_bench, or {"error": message}."""
    return kernel_bench_json(kernel_bench_cmd(args, family, problem, extra), log)


def instance_facts(args, name, problem, log):
    """Anchors / validity / attended pairs of the workload our kernel_bench builds with --seed."""
    path = os.path.join(args.work_dir, name.replace(" ", "_") + ".instance.json")
    cmd = [args.kernel_bench, "--family", "attention_fwd", "--problem", pjson(problem), "--seed", str(args.seed),
           "--instance-only", "--instance-out", path]
    r, _ = run_cmd(cmd, log)
    if r.returncode != 0:
        raise RuntimeError("kernel_bench --instance-only failed for %s: %s" % (name, r.stderr.strip()))
    with open(path) as f:
        return json.load(f)


def row_count(problem, facts, b, q):
    """Attended kv positions of query row q (batch b), straight from the spec's mask text."""
    if problem["mask"] == "causal":
        return q + 1
    if problem["mask"] == "doc_causal":  # rows past the last document attend nothing
        cu = facts["cu_seqlens"]
        for d in range(len(cu) - 1):
            if cu[d] <= q < cu[d + 1]:
                return q - cu[d] + 1
        return 0
    bs, win = problem["block_size"], problem.get("window", 2048)
    j, o = q // bs, q % bs
    if not facts["valid"][b][j]:
        return 0
    a = facts["anchors"][b][j]
    if problem["mask"] == "dflash_full":
        return a + bs
    return min(a, max(win - 1 - o, 0)) + o + 1


def pairs_from_anchors(problem, facts):
    """Attended pairs recounted here from the anchors, to cross-check kernel_bench's instance file."""
    return sum(row_count(problem, facts, b, q) for b in range(problem["batch"]) for q in range(problem["seq_q"]))


def doc_ids(p, facts):
    """Each token's document index (-1 past the last document), from the workload's cu_seqlens."""
    ids = [-1] * p["seq_q"]
    cu = facts["cu_seqlens"]
    for d in range(len(cu) - 1):
        ids[cu[d]:cu[d + 1]] = [d] * (cu[d + 1] - cu[d])
    return ids


def make_doc_mask_mod(doc):
    """flex_attention's mask_mod for document-causal attention; doc indexes by token (a torch tensor on the GPU,
    a list on the CPU for the dry run's check)."""
    def mask_mod(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (doc[q_idx] == doc[kv_idx]) & (doc[q_idx] >= 0)
    return mask_mod


def make_mask_mod(p, anchors, valid):
    """flex_attention's mask_mod for a DFlash problem; anchors / valid index as [b, j] (torch tensors on the GPU,
    or Grid2 on the CPU for the dry run's check). Only operators that torch tensors and Python ints share."""
    bs, ctx, win = p["block_size"], p["ctx_len"], p.get("window", 2048)
    sliding = p["mask"] == "dflash_sliding"

    def mask_mod(b, h, q_idx, kv_idx):
        j = q_idx // bs
        a = anchors[b, j]
        if sliding:
            ctx_vis = (kv_idx < a) & (kv_idx >= a + (q_idx - j * bs) - (win - 1))
            blk = (kv_idx >= ctx + j * bs) & (kv_idx <= ctx + q_idx)
        else:
            ctx_vis = kv_idx < a
            blk = (kv_idx >= ctx + j * bs) & (kv_idx < ctx + j * bs + bs)
        return (ctx_vis | blk) & valid[b, j]
    return mask_mod


class Grid2:
    """[b][j] lists indexed as grid[b, j], like the tensors the mask_mod sees on the GPU."""

    def __init__(self, rows):
        self.rows = rows

    def __getitem__(self, bj):
        return self.rows[bj[0]][bj[1]]


def check_mask_mod(p, facts, stride=61):
    """Evaluates the flex mask_mod on the CPU for every stride-th query row (and the last) and every kv position,
    and compares the counts with the spec's row counts; returns the number of rows checked (raises on a
    difference)."""
    if p["mask"] == "doc_causal":
        mm = make_doc_mask_mod(doc_ids(p, facts))
    else:
        mm = make_mask_mod(p, Grid2(facts["anchors"]), Grid2([[bool(x) for x in r] for r in facts["valid"]]))
    rows = 0
    for b in range(p["batch"]):
        for q in list(range(0, p["seq_q"], stride)) + [p["seq_q"] - 1]:
            got = sum(1 for kv in range(p["seq_kv"]) if mm(b, 0, q, kv))
            want = row_count(p, facts, b, q)
            if got != want:
                raise RuntimeError("mask_mod row %d sees %d kv positions, the spec says %d" % (q, got, want))
            rows += 1
    return rows


def input_bytes(p):
    return 2 * p["batch"] * (2 * p["seq_q"] * p["heads_q"] + 2 * p["seq_kv"] * p["heads_kv"]) * p["head_dim"]


# -------------------------------------------------------------------------------------------------- torch side

class Timer:
    """Warm-up, then `reps` runs each after an L2 flush, timed with CUDA events around the run only; median ms.
    With setup, each run is fn(setup()) and setup() runs untimed before the flush (the backward: a fresh forward
    graph for every run, since a compiled backward with donated buffers may run only once per graph)."""

    def __init__(self, torch, warmup, reps, flush):
        self.torch, self.warmup, self.reps = torch, warmup, reps
        self.flush = None
        if flush:
            l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20) or (64 << 20)
            self.flush = torch.empty(2 * l2, dtype=torch.uint8, device="cuda")

    def __call__(self, fn, setup=None):
        torch = self.torch
        for _ in range(self.warmup):
            fn(setup()) if setup else fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(self.reps):
            x = setup() if setup else None
            if self.flush is not None:
                self.flush.zero_()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn(x) if setup else fn()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b))
        ts.sort()
        n = len(ts)
        return (ts[(n - 1) // 2] + ts[n // 2]) / 2


def torch_inputs(torch, p, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    B, hq, hkv, d = p["batch"], p["heads_q"], p["heads_kv"], p["head_dim"]

    def rnd(h, s):
        return torch.randn(B, h, s, d, device="cuda", dtype=torch.bfloat16, generator=g)

    q, k, v = rnd(hq, p["seq_q"]), rnd(hkv, p["seq_kv"]), rnd(hkv, p["seq_kv"])
    do = rnd(hq, p["seq_q"])
    return [x.requires_grad_() for x in (q, k, v)] + [do]


def measure_fwd_bwd(torch, timer, fwd, backward=True):
    """fwd() -> output that depends on q, k, v; returns fwd ms, bwd ms (None without backward), peak extra bytes
    of one fwd+bwd (of one fwd without backward)."""
    q, k, v, do = fwd.inputs
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    m0 = torch.cuda.memory_allocated()
    o = fwd()
    grads = torch.autograd.grad(o, (q, k, v), do) if backward else None
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - m0
    del o, grads
    tf = timer(fwd)
    tb = timer(lambda o: torch.autograd.grad(o, (q, k, v), do), setup=fwd) if backward else None
    return tf, tb, peak


def flex_row(torch, timer, name, p, facts, seed):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    if p["mask"] == "doc_causal":
        mask_mod = make_doc_mask_mod(torch.tensor(doc_ids(p, facts), device="cuda", dtype=torch.int32))
    else:
        anchors = torch.tensor(facts["anchors"], device="cuda", dtype=torch.int32)
        valid = torch.tensor(facts["valid"], device="cuda", dtype=torch.bool)
        mask_mod = make_mask_mod(p, anchors, valid)
    backward = not forward_only(p)
    q, k, v, do = torch_inputs(torch, p, seed)
    t0 = time.time()
    bm = create_block_mask(mask_mod, p["batch"], None, p["seq_q"], p["seq_kv"], device="cuda")
    torch.cuda.synchronize()
    mask_s = time.time() - t0
    fa = torch.compile(flex_attention, dynamic=False)  # one static compile per shape, as a training run has

    def fwd():
        return fa(q, k, v, block_mask=bm, enable_gqa=True)
    fwd.inputs = (q, k, v, do)
    t0 = time.time()
    o = fwd()
    if backward:
        torch.autograd.grad(o, (q, k, v), do)
    torch.cuda.synchronize()
    first = time.time() - t0
    del o
    tf, tb, peak = measure_fwd_bwd(torch, timer, fwd, backward)
    return {"system": "flex compiled", "fwd_ms": tf, "bwd_ms": tb, "peak_extra_bytes": peak,
            "note": "first %s %.1f s (incl. compile), mask build %.1f s" % ("fwd+bwd" if backward else "fwd", first,
                                                                          mask_s)}


def sm80_flex_child(args):
    """The --sm80-child process: flex for one shape on the mma.sync instruction set; prints one JSON row."""
    from triton_sm80 import count_ptx, enter_sm80_process, reported_as_sm80
    triton_cache = enter_sm80_process(inductor=True)
    import torch
    import torch._inductor.template_heuristics.triton as heuristics

    # Only flex's configuration choice sees (8, 0): Inductor passes the real capability to Triton's compile, which
    # the override makes emit mma.sync code (capability 8.0 there too built sm_80 cubins the H200 cannot load).
    for name in ("get_flex_attn_fwd_configs", "get_flex_attn_bwd_configs"):
        original = getattr(heuristics.CUDAConfigHeuristic, name)

        def chosen_as_sm80(self, *a, _original=original, **k):
            with reported_as_sm80(torch):
                return _original(self, *a, **k)
        setattr(heuristics.CUDAConfigHeuristic, name, chosen_as_sm80)
    with open(args.sm80_child) as f:
        spec = json.load(f)
    timer = Timer(torch, args.warmup, args.reps, not args.no_flush)
    row = flex_row(torch, timer, spec["name"], spec["problem"], spec["facts"], args.seed)
    wg, ms = count_ptx(triton_cache)
    row["system"] = "flex compiled, sm_80 instruction set"
    row["note"] += ("; TRITON_OVERRIDE_ARCH=sm80, flex's configurations chosen as for capability (8, 0); PTX: %d "
                    "wgmma, %d mma.sync" % (wg, ms))
    print(json.dumps(row), flush=True)
    return 0 if wg == 0 else 1


def sm80_flex_row(args, name, p, facts, log):
    """flex on the mma.sync instruction set for one shape, in a child process (the overrides are per process)."""
    path = os.path.join(args.work_dir, name.replace(" ", "_") + ".sm80.json")
    with open(path, "w") as f:
        json.dump({"name": name, "problem": p, "facts": facts}, f)
    cmd = [sys.executable, os.path.abspath(__file__), "--sm80-child", path, "--seed", str(args.seed),
           "--warmup", str(args.warmup), "--reps", str(args.reps)] + (["--no-flush"] if args.no_flush else [])
    r, _ = run_cmd(cmd, log)
    try:
        row = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"system": "flex, sm_80 instruction set", "note": "failed: " + (r.stderr.strip()[-300:] or "no output")}
    if r.returncode != 0:
        row["note"] += "; NOT A STAND-IN: its PTX holds wgmma"
    return row


def sdpa_row(torch, timer, name, p, seed, backend="FLASH_ATTENTION"):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    sdpa = torch.nn.functional.scaled_dot_product_attention
    q, k, v, do = torch_inputs(torch, p, seed)
    note = ""
    with sdpa_kernel(getattr(SDPBackend, backend)):
        gqa = p["heads_q"] != p["heads_kv"]

        def fwd():
            return sdpa(q, k, v, is_causal=True, enable_gqa=gqa)
        fwd.inputs = (q, k, v, do)
        try:
            fwd()
        except RuntimeError:  # a backend without GQA: k and v repeated to the query heads before the timed calls
            if not gqa:
                raise
            r = p["heads_q"] // p["heads_kv"]
            kr, vr = (x.detach().repeat_interleave(r, dim=1).requires_grad_() for x in (k, v))

            def fwd():
                return sdpa(q, kr, vr, is_causal=True)
            fwd.inputs = (q, kr, vr, do)
            note = "k, v repeated to %d heads before the timed calls (no GQA in this backend)" % p["heads_q"]
        tf, tb, peak = measure_fwd_bwd(torch, timer, fwd, not forward_only(p))
    label = {"FLASH_ATTENTION": "SDPA flash", "CUDNN_ATTENTION": "SDPA cuDNN"}.get(backend, "SDPA " + backend)
    return {"system": label, "fwd_ms": tf, "bwd_ms": tb, "peak_extra_bytes": peak, "note": note}


# ------------------------------------------------------------------------------------------------------- table

def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def table(rows):
    lines = ["| shape | system | fwd ms | fwd TFLOP/s | bwd ms | bwd TFLOP/s | peak extra GiB (fwd+bwd, over inputs) "
             "| note |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        fl = r.get("fwd_flops")
        tf, tb = r.get("fwd_ms"), r.get("bwd_ms")
        ftf = fl / tf / 1e9 if fl and tf else None
        btf = 2.5 * fl / tb / 1e9 if fl and tb else None
        mem = r.get("peak_extra_bytes")
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["shape"], r["system"], fmt(tf, ".3f"), fmt(ftf, ".0f"), fmt(tb, ".3f"), fmt(btf, ".0f"),
            fmt(None if mem is None else mem / GiB, ".3f"), r.get("note", "")))
    return "\n".join(lines)


def merge_rounds(rounds):
    """rounds: one list of rows per round, the same systems in the same order. One row per system: fwd_ms and
    bwd_ms the median over the rounds (None when a round has none), the rounds' times in the note."""
    if len(rounds) == 1:
        return rounds[0]
    merged = []
    for i, first in enumerate(rounds[0]):
        row = dict(first)
        notes = [first.get("note", "")] if first.get("note") else []
        for key, label in (("fwd_ms", "fwd"), ("bwd_ms", "bwd")):
            times = [r[i].get(key) if i < len(r) else None for r in rounds]
            if first.get(key) is None:
                continue
            row[key] = statistics.median(times) if all(t is not None for t in times) else None
            notes.append("%s rounds %s ms" % (label, " / ".join(fmt(t, ".3f") for t in times)))
        row["note"] = "; ".join(notes)
        merged.append(row)
    return merged


def our_row(name, p, fl, fwd, bwd, system="ours (tuned winner)"):
    row = {"shape": name, "system": system, "fwd_flops": fl}
    notes = []
    if "error" in fwd:
        notes.append("fwd failed: " + fwd["error"])
    else:
        row["fwd_ms"] = fwd["median_ms"]
        notes.append("fwd %s" % pjson(fwd["config"]))
        if abs(fwd["flops"] - fl) > 1e-6 * fl:
            notes.append("FLOP COUNT DIFFERS: kernel_bench %.4g vs script %.4g" % (fwd["flops"], fl))
    if bwd is None:
        notes.append("forward only (head dim 256); peak memory not measured")
    elif "error" in bwd:
        notes.append("bwd failed: " + bwd["error"])
    else:
        row["bwd_ms"] = bwd["median_ms"]
        row["peak_extra_bytes"] = max(bwd["peak_extra_bytes"] - input_bytes(p), 0)
        notes.append("bwd %s" % pjson(bwd["config"]))
        if bwd["config"].get("dq_mode", 0) == 0:
            acc = 4 * p["batch"] * p["heads_q"] * p["seq_q"] * p["head_dim"]
            notes.append("peak includes the fp32 dQ accumulator of dq_mode 0 (%.3f GiB)" % (acc / GiB))
    row["note"] = "; ".join(notes)
    return row


def time_ours(args, shapes, flops, extra, log):
    """One round of our tuned winners (and the portable tier's with --portable-arch) through kernel_bench:
    ({name: [rows]}, {name: kernel_bench JSON by key})."""
    ours, kbs = {}, {}
    for name, p in shapes:
        fwd = run_kernel_bench(args, "attention_fwd", p, log, extra)
        bwd = None if forward_only(p) else run_kernel_bench(args, "attention_bwd", p, log, extra)
        kbs[name] = {"fwd": fwd, "bwd": bwd}
        ours[name] = [our_row(name, p, flops[name], fwd, bwd)]
        log_line(log, "%s: ours fwd %s ms, bwd %s ms" % (name, fwd.get("median_ms", fwd.get("error")),
                                                      "-" if bwd is None else bwd.get("median_ms", bwd.get("error"))))
        if args.portable_arch:
            arch = ["--arch", args.portable_arch]
            pf = run_kernel_bench(args, "attention_fwd", p, log, extra + arch)
            pb = None if forward_only(p) else run_kernel_bench(args, "attention_bwd", p, log, extra + arch)
            kbs[name].update({"portable_fwd": pf, "portable_bwd": pb})
            ours[name].append(our_row(name, p, flops[name], pf, pb,
                                      "ours, %s winners (portable tier)" % args.portable_arch))
    return ours, kbs


def time_references(args, torch, timer, tv, shapes, facts, flops, log):
    """One round of the references (flex, SDPA's backends; a "not run" row without torch): {name: [rows]}."""
    refs = {}
    for name, p in shapes:
        others = []
        if torch is None:
            others.append({"system": "flex / SDPA", "note": "not run: torch " + tv})
        else:
            systems = (["FLASH_ATTENTION", "CUDNN_ATTENTION"] if p["mask"] == "causal" else ["flex"])
            if args.sm80_peers and is_dflash(p):
                systems.append("flex sm80")
            for system in systems:
                try:
                    if system == "flex sm80":
                        others.append(sm80_flex_row(args, name, p, facts[name], log))
                    elif system == "flex":
                        others.append(flex_row(torch, timer, name, p, facts[name], args.seed))
                    else:
                        others.append(sdpa_row(torch, timer, name, p, args.seed, system))
                except Exception as e:  # the comparison must not hide our numbers
                    others.append({"system": system, "note": ("failed: %s: %s" % (type(e).__name__, e))[:300]})
                torch.cuda.empty_cache()
        for other in others:
            other.update({"shape": name, "fwd_flops": flops[name]})
        refs[name] = others
        log_line(log, "%s: done" % name)
    return refs


def merge_kernel_bench(rounds):
    """rounds: one shape's kernel_bench JSON by key, per round. The first round's, with each key's median_ms the
    median over the rounds and their times in rounds_ms (where every round has one)."""
    kb = dict(rounds[0])
    for key in ("fwd", "bwd", "portable_fwd", "portable_bwd"):
        if kb.get(key) is None or "median_ms" not in kb[key]:
            continue
        times = [r[key].get("median_ms") for r in rounds]
        if all(t is not None for t in times):
            kb[key] = dict(kb[key], median_ms=statistics.median(times), rounds_ms=times)
    return kb


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--build-dir", default="build-gpu", help="CMake build dir with dflash-tune and kernel_bench")
    ap.add_argument("--dflash-tune", help="dflash-tune binary (default: BUILD/tools/dflash_tune/dflash-tune)")
    ap.add_argument("--kernel-bench", help="kernel_bench binary (default: BUILD/tools/bench/kernel_bench)")
    ap.add_argument("--cache-dir", default="/tmp/dflash-bench-cache", help="kernel cache for warmup and lookups")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/attention_bench"),
                    help="where attention_bench.md and .json go (default $OUT)")
    ap.add_argument("--work-dir", default="/tmp/attention_bench_work", help="instance files and the log")
    ap.add_argument("--seed", type=int, default=1, help="inputs / anchors seed (default 1)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed runs before timing (default 3)")
    ap.add_argument("--reps", type=int, default=25, help="timed runs, median reported (default 25)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="time every system this many times, ours then the references in each round, and report "
                         "each system's median over the rounds with the rounds in its note (default 1): the GPU's "
                         "drift then falls on both sides")
    ap.add_argument("--no-flush", action="store_true", help="do not flush L2 before each timed run (both sides)")
    ap.add_argument("--budget", help="passed to `dflash-tune warmup --budget` (e.g. 40 or 90s)")
    ap.add_argument("--skip-warmup", action="store_true", help="use the cache as it is")
    ap.add_argument("--check", action="store_true", help="kernel_bench --check (float64 reference; slow for bwd)")
    ap.add_argument("--portable-arch", help="also warm up and time the winners of this arch (sm_90 on a Hopper GPU: "
                    "the portable tier alone, beside the default arch's sm_90a winners over both tiers)")
    ap.add_argument("--sm80-peers", action="store_true",
                    help="add the sm_120 stand-in rows: flex compiled for the mma.sync instruction set (see above)")
    ap.add_argument("--sm80-child", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="only " + " and ".join(QUICK))
    ap.add_argument("--shapes", help="comma-separated subset of: " + ", ".join(n for n, _ in SHAPES))
    ap.add_argument("--dry-run", action="store_true",
                    help="no torch, no GPU: print the commands, compute instance facts and FLOP counts")
    args = ap.parse_args()
    if args.sm80_child:
        return sm80_flex_child(args)
    args.dflash_tune = args.dflash_tune or os.path.join(args.build_dir, "tools", "dflash_tune", "dflash-tune")
    args.kernel_bench = args.kernel_bench or os.path.join(args.build_dir, "tools", "bench", "kernel_bench")
    shapes = SHAPES
    if args.quick:
        shapes = [s for s in SHAPES if s[0] in QUICK]
    if args.shapes:
        want = [w.strip() for w in args.shapes.split(",")]
        unknown = [w for w in want if w not in dict(SHAPES)]
        if unknown:
            ap.error("unknown shape(s) %s; known: %s" % (unknown, ", ".join(n for n, _ in SHAPES)))
        shapes = [s for s in SHAPES if s[0] in want]
    if args.reps < 1 or args.warmup < 0 or args.rounds < 1:
        ap.error("--reps and --rounds must be >= 1 and --warmup >= 0")
    for b in [args.kernel_bench] + ([] if args.dry_run or args.skip_warmup else [args.dflash_tune]):
        if not os.access(b, os.X_OK):
            ap.error("not an executable: %s (build it, or pass --build-dir / --dflash-tune / --kernel-bench)" % b)
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.work_dir, exist_ok=True)
    flush = [] if not args.no_flush else ["--no-flush"]
    extra = flush + (["--check"] if args.check else [])

    with open(os.path.join(args.work_dir, "attention_bench.log"), "w") as log:
        # Instance facts and FLOP counts first: they need neither GPU nor cache.
        facts, flops = {}, {}
        for name, p in shapes:
            f = instance_facts(args, name, p, log)
            mine = pairs_from_anchors(p, f)
            if mine != f["pairs"]:
                raise RuntimeError("%s: pairs from the anchors %d != kernel_bench's %d" % (name, mine, f["pairs"]))
            facts[name] = f
            flops[name] = 4.0 * f["pairs"] * p["head_dim"] * p["heads_q"]
            log_line(log, "%s: %d attended pairs per head, %.3f TFLOP fwd, %.3f TFLOP bwd" %
                     (name, f["pairs"], flops[name] / 1e12, 2.5 * flops[name] / 1e12))
        if args.dry_run:
            for name, p in shapes:
                if p["mask"] != "causal":
                    n = check_mask_mod(p, facts[name])
                    log_line(log, "%s: flex mask_mod agrees with the spec on %d sampled rows" % (name, n))
            log_line(log, "dry run: would run")
            log_line(log, "  " + " ".join(warmup_cmd(args, shapes)))
            for name, p in shapes:
                for fam in ("attention_fwd",) + (() if forward_only(p) else ("attention_bwd",)):
                    log_line(log, "  " + " ".join(kernel_bench_cmd(args, fam, p, extra)))
            rows = []
            for name, p in shapes:
                other = "SDPA flash" if p["mask"] == "causal" else "flex compiled"
                for system in ("ours (tuned winner)", other):
                    rows.append({"shape": name, "system": system, "fwd_flops": flops[name], "note": "not run (dry run)"})
            print(table(rows))
            return 0

        results = {"shapes": {n: p for n, p in shapes}, "seed": args.seed, "reps": args.reps,
                   "warmup": args.warmup, "flush_l2": not args.no_flush, "kernel_bench": {}, "torch": {}}
        if not args.skip_warmup:
            r, secs = run_cmd(warmup_cmd(args, shapes), log, stream=True)
            log_line(log, "warmup: exit %d, %.1f s" % (r.returncode, secs))
            results["warmup_s"] = secs
            if args.portable_arch:
                r, secs = run_cmd(warmup_cmd(args, shapes, args.portable_arch), log, stream=True)
                log_line(log, "warmup --arch %s: exit %d, %.1f s" % (args.portable_arch, r.returncode, secs))
        torch, timer, dev, tv = None, None, "?", "not imported"
        runs = []  # per round: ({name: [our rows]}, {name: [reference rows]}, {name: kernel_bench JSON})
        for rnd in range(args.rounds):
            if args.rounds > 1:
                log_line(log, "round %d of %d" % (rnd + 1, args.rounds))
            ours, kbs = time_ours(args, shapes, flops, extra, log)
            if rnd == 0:
                try:
                    import torch  # only now: kernel_bench ran without torch holding the GPU
                    timer = Timer(torch, args.warmup, args.reps, not args.no_flush)
                    dev, tv = torch.cuda.get_device_name(0), torch.__version__
                except Exception as e:  # noqa: BLE001 - our numbers are still reported
                    torch, dev, tv = None, "?", "unavailable (%s: %s)" % (type(e).__name__, e)
            refs = time_references(args, torch, timer, tv, shapes, facts, flops, log)
            runs.append((ours, refs, kbs))
        rows = []
        for name, p in shapes:
            merged_refs = merge_rounds([r[1][name] for r in runs])
            rows.extend(merge_rounds([r[0][name] for r in runs]) + merged_refs)
            results["torch"][name] = merged_refs
            results["kernel_bench"][name] = merge_kernel_bench([r[2][name] for r in runs])
        results["rounds"] = args.rounds
        text = table(rows)
        header = ("Attention, %s, torch %s; median of %d after %d warm-ups, L2 %s; anchors from seed %d "
                  "(identical for all systems)%s\n\n" % (dev, tv, args.reps, args.warmup,
                                                         "not flushed" if args.no_flush else "flushed before each run",
                                                         args.seed,
                                                         "" if args.rounds == 1 else
                                                         "; every system timed in %d rounds (ours, then the "
                                                         "references), its median over the rounds shown" % args.rounds))
        with open(os.path.join(args.out, "attention_bench.md"), "w") as f:
            f.write(header + text + "\n")
        with open(os.path.join(args.out, "attention_bench.json"), "w") as f:
            json.dump(results, f, indent=1)
        print(header + text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
