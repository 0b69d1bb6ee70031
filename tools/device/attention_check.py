#!/usr/bin/env python3
"""GPU correctness check (and a first timing) of the attention kernels, for the device machine.

Compiles kernels/attention/attention_kernels.cu with nvcc (one cubin per group of template instantiations, in
parallel), loads the cubins with the CUDA driver API through ctypes (the kernels take the AttnParams struct by value,
mirrored here with ctypes), launches them on torch tensors and compares, for every mask kind, GQA ratios 1/4/6, both
[B,S,H,D] and [B,H,S,D] layouts, sizes that are not multiples of any tile and rows that see nothing:
forward O and LSE and backward dQ/dK/dV against a float64 torch reference built from a dense mask written straight
from the spec text (dflash-training.md section 4). Pass rule (FlashAttention's): max |kernel - fp64| <= 2 * max
|plain bf16 torch - fp64| + 1e-4, no NaN anywhere, rows that see nothing exactly 0 with LSE -inf. Outputs are
poisoned with NaN before every launch and inputs are fresh random draws for every case.

Usage: python3 tools/device/attention_check.py [--out DIR] [--arch sm_90] [--quick] [--bench | --bench-ours]
(--bench: ours vs flex / SDPA; --bench-ours: ours only)
"""
import argparse
import concurrent.futures
import ctypes
import math
import os
import random
import shutil
import subprocess
import sys
import time

import torch

# The mirror of attention_params.cuh (structs, constants, shared-memory sizes), checked against the header by a CPU
# test: tools/device/attention_params.py.
from attention_params import AttnParams, MASK_DOC_BOUND, MASKS, bwd2d_smem, bwd_smem, dq_smem, fwd_smem

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KDIR = os.path.join(ROOT, "kernels", "attention")
COMMON_KDIR = os.path.join(ROOT, "kernels", "common")  # the shared PTX wrappers the kernels include


def kernel_mask(c):
    """The kernels' MASK template argument of case c (the doc-bound instantiation for packed rows)."""
    return MASKS[c.mask] | (MASK_DOC_BOUND if c.doc_start is not None else 0)


NVCC = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"


# ---------------------------------------------------------------- compile + load
def mangle(name, args):
    enc = "".join(f"Lb{int(a)}E" if isinstance(a, bool) else f"Li{a}E" for a in args)
    return f"_ZN11dflash_attn{len(name)}{name}I{enc}EEvNS_10AttnParamsE"


def texpr(name, args):
    return "dflash_attn::%s<%s>" % (name, ",".join(("true" if a else "false") if isinstance(a, bool) else str(a)
                                                   for a in args))


class Driver:
    def __init__(self):
        torch.cuda.init()
        torch.zeros(1, device="cuda")
        self.cu = ctypes.CDLL("libcuda.so.1")
        self.funcs = {}

    def check(self, r, what):
        if r != 0:
            s = ctypes.c_char_p()
            self.cu.cuGetErrorString(r, ctypes.byref(s))
            raise RuntimeError(f"{what}: CUDA error {r} ({s.value.decode() if s.value else '?'})")

    def load(self, cubin_path, names):
        data = open(cubin_path, "rb").read()
        mod = ctypes.c_void_p()
        self.check(self.cu.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(data)), f"load {cubin_path}")
        for n in names:
            f = ctypes.c_void_p()
            self.check(self.cu.cuModuleGetFunction(ctypes.byref(f), mod, n.encode()), f"get {n}")
            self.funcs[n] = f

    def launch(self, name, grid, threads, smem, params):
        f = self.funcs[name]
        if smem > 48 * 1024:
            self.check(self.cu.cuFuncSetAttribute(f, 8, ctypes.c_int(smem)), f"smem attr {name}")
        arg = ctypes.c_void_p(ctypes.addressof(params))
        argv = (ctypes.c_void_p * 1)(arg)
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        self.check(self.cu.cuLaunchKernel(f, grid[0], grid[1], grid[2], threads, 1, 1, ctypes.c_uint(smem), stream,
                                          argv, None), f"launch {name} grid={grid} smem={smem}")


def compile_all(kernels, arch, outdir, log, ngroups=12):
    """kernels: set of (name, args). Compiles them in parallel groups; returns list of (cubin, mangled names)."""
    kernels = sorted(kernels, key=str)
    groups = [kernels[i::ngroups] for i in range(ngroups)]
    groups = [g for g in groups if g]
    jobs = []
    for i, g in enumerate(groups):
        src = os.path.join(outdir, f"inst{i}.cu")
        with open(src, "w") as f:
            f.write('#include "attention_kernels.cu"\n')
            for name, args in g:
                f.write(f"template __global__ void {texpr(name, args)}(const dflash_attn::AttnParams);\n")
        jobs.append((src, os.path.join(outdir, f"inst{i}.cubin"), [mangle(n, a) for n, a in g]))

    def run(job):
        src, cub, _ = job
        cmd = [NVCC, "-std=c++17", f"-arch={arch}", "-cubin", "-O3", "-I", KDIR, "-I", COMMON_KDIR, "-Xptxas", "-v",
               src, "-o", cub]
        r = subprocess.run(cmd, capture_output=True, text=True)
        return r.returncode, r.stdout + r.stderr

    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(os.cpu_count() or 4, len(jobs))) as ex:
        results = list(ex.map(run, jobs))
    for (src, _, _), (rc, out) in zip(jobs, results):
        log.write(f"== {src}\n{out}\n")
        if rc != 0:
            print(out[-4000:])
            raise SystemExit(f"nvcc failed for {src}")
    print(f"compiled {len(kernels)} kernels in {len(jobs)} groups: {time.time() - t0:.1f} s", flush=True)
    return [(cub, names) for _, cub, names in jobs]


# ---------------------------------------------------------------- problems, masks (from the spec text), reference
class Case:
    def __init__(self, name, mask, B, Hq, Hkv, Sq, Skv, D, layout="bshd", docs=None, bs=16, ctx=0, anchors=None,
                 valid=None, window=2048, bwd=True, doc_start=None):
        self.__dict__.update(locals())
        del self.__dict__["self"]


def dense_mask(c):
    """[B, Sq, Skv] bool, written from dflash-training.md section 4 / the mask kinds' definitions."""
    q = torch.arange(c.Sq, device="cuda")[:, None]
    kv = torch.arange(c.Skv, device="cuda")[None, :]
    if c.mask == "none":
        m = torch.ones(c.Sq, c.Skv, dtype=torch.bool, device="cuda")
        return m[None].expand(c.B, -1, -1).clone()
    if c.mask == "causal":
        return (kv <= q + (c.Skv - c.Sq))[None].expand(c.B, -1, -1).clone()
    if c.mask == "doc":
        m = torch.zeros(c.Sq, c.Skv, dtype=torch.bool, device="cuda")
        for d in range(len(c.docs) - 1):
            s, e = c.docs[d], c.docs[d + 1]
            rows = (q >= s) & (q < e)
            m |= rows & (kv >= s) & (kv <= q)
        return m[None].expand(c.B, -1, -1).clone()
    m = torch.zeros(c.B, c.Sq, c.Skv, dtype=torch.bool, device="cuda")
    for b in range(c.B):
        for j in range(c.Sq // c.bs):
            if not c.valid[b][j]:
                continue  # invalid blocks see nothing
            a = c.anchors[b][j]
            r = torch.arange(j * c.bs, (j + 1) * c.bs, device="cuda")[:, None]
            off = r - j * c.bs
            base = c.ctx + j * c.bs
            if c.mask == "dflash_full":
                ctx_vis = kv < a
                blk = (kv >= base) & (kv < base + c.bs)
            else:
                ctx_vis = (kv < a) & (kv >= a + off - (c.window - 1))
                blk = (kv >= base) & (kv - base <= off)
            if c.doc_start is not None:  # packed rows: block j's context also kv >= doc_start[j]
                ctx_vis = ctx_vis & (kv >= c.doc_start[b][j])
            m[b, j * c.bs:(j + 1) * c.bs] = (ctx_vis & (kv < c.ctx)) | blk
    return m


def reference(q, k, v, dout, mask, scale, dtype):
    """q [B,Hq,Sq,D], k/v [B,Hkv,Skv,D]; returns out, lse, dq, dk, dv computed in `dtype` (bf16 = plain torch)."""
    G = q.shape[1] // k.shape[1]
    qq = q.detach().to(dtype).requires_grad_()
    kk = k.detach().to(dtype).requires_grad_()
    vv = v.detach().to(dtype).requires_grad_()
    ke = kk.repeat_interleave(G, dim=1)
    ve = vv.repeat_interleave(G, dim=1)
    s = (qq @ ke.transpose(-1, -2)) * scale
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    s = s.to(acc)
    m = mask[:, None]
    sf = s.masked_fill(~m, -1e30)
    lse = torch.logsumexp(sf, dim=-1, keepdim=True)
    p = torch.exp(sf - lse) * m
    out = p.to(dtype) @ ve
    out.backward(dout.to(dtype))
    anyrow = m.any(-1)
    lse = torch.where(anyrow, lse.squeeze(-1), torch.full_like(lse.squeeze(-1), -math.inf))
    return [x.detach().double() for x in (out, lse, qq.grad, kk.grad, vv.grad)]


def make_tensor(c, heads, seq, layout):
    if layout == "bshd":
        t = torch.randn(c.B, seq, heads, c.D, device="cuda", dtype=torch.bfloat16)
        return t, t.permute(0, 2, 1, 3), (t.stride(0), t.stride(2), t.stride(1))
    t = torch.randn(c.B, heads, seq, c.D, device="cuda", dtype=torch.bfloat16)
    return t, t, (t.stride(0), t.stride(1), t.stride(2))


def empty_like_layout(c, heads, seq, layout):
    if layout == "bshd":
        t = torch.full((c.B, seq, heads, c.D), math.nan, device="cuda", dtype=torch.bfloat16)
        return t, t.permute(0, 2, 1, 3), (t.stride(0), t.stride(2), t.stride(1))
    t = torch.full((c.B, heads, seq, c.D), math.nan, device="cuda", dtype=torch.bfloat16)
    return t, t, (t.stride(0), t.stride(1), t.stride(2))


# ---------------------------------------------------------------- variants
FWD_VARIANTS = {64: [(64, 64, 4, 2), (128, 64, 4, 1), (128, 128, 8, 2)],
                128: [(64, 64, 4, 2), (128, 64, 8, 2), (128, 32, 4, 1), (128, 32, 4, 2), (128, 64, 4, 2)],
                256: [(64, 32, 4, 2), (64, 64, 4, 1)]}
# (block_m, block_n, stages, dq_mode[, warp_layout]); warps = block_n / 16; dq_mode 0 = atomic, 1 = separate pass
# (tile block_m x 64); warp_layout 1 (default) = AttnBwdKv, 2 = AttnBwdKv2d (FlashAttention-2's 2-D layout)
BWD_VARIANTS = {64: [(64, 64, 1, 0), (64, 128, 2, 1), (32, 64, 2, 0), (16, 64, 1, 0), (64, 128, 1, 0, 2),
                     (64, 64, 2, 0, 2)],
                128: [(64, 64, 1, 0), (32, 64, 2, 0), (64, 64, 1, 1), (64, 128, 2, 0), (32, 128, 1, 0),
                      (64, 128, 1, 0, 2), (64, 128, 2, 0, 2), (64, 64, 1, 0, 2)]}


def fwd_kernel(D, cfg, mk):
    bm, bn, nw, st = cfg
    return ("AttnFwd", (D, bm, bn, nw, st, mk))


def bwd_kernels(D, cfg, mk):
    bm, bn, st, dqm = cfg[:4]
    if len(cfg) > 4 and cfg[4] == 2:
        kv = ("AttnBwdKv2d", (D, bm, bn, bn // 16, st, mk))
    else:
        kv = ("AttnBwdKv", (D, bm, bn, bn // 16, st, mk, dqm == 0))
    ks = [("AttnBwdPre", (D, dqm == 0)), kv]
    if dqm == 0:
        ks.append(("AttnBwdDqConvert", (D,)))
    else:
        ks.append(("AttnBwdDq", (D, bm, 64, bm // 16, st, mk)))
    return ks


def fill_params(c, P, t):
    P.batch, P.heads_q, P.heads_kv, P.head_dim = c.B, c.Hq, c.Hkv, c.D
    P.scale = 1.0 / math.sqrt(c.D)
    for name, key in (("q", "q"), ("k", "k"), ("v", "v"), ("o", "o"), ("do", "do"), ("dq", "dq"), ("dk", "dk"),
                      ("dv", "dv")):
        st = t[key + "_strides"]
        setattr(P, f"{name}_batch_stride", st[0])
        setattr(P, f"{name}_head_stride", st[1])
        setattr(P, f"{name}_seq_stride", st[2])
    P.q, P.k, P.v, P.o = t["q"].data_ptr(), t["k"].data_ptr(), t["v"].data_ptr(), t["o"].data_ptr()
    P.lse, P.dout = t["lse"].data_ptr(), t["do"].data_ptr()
    P.dq, P.dk, P.dv = t["dq"].data_ptr(), t["dk"].data_ptr(), t["dv"].data_ptr()
    P.delta, P.dq_accum = t["delta"].data_ptr(), t["dq_accum"].data_ptr()
    M = P.mask
    M.kind, M.seq_q, M.seq_kv = MASKS[c.mask], c.Sq, c.Skv
    M.cu_seqlens = t["cu"].data_ptr() if t.get("cu") is not None else None
    M.num_docs = len(c.docs) - 1 if c.docs else 0
    M.anchors = t["anchors"].data_ptr() if t.get("anchors") is not None else None
    M.block_valid = t["valid"].data_ptr() if t.get("valid") is not None else None
    M.doc_start = t["doc_start"].data_ptr() if t.get("doc_start") is not None else None
    M.num_blocks = c.Sq // c.bs if c.mask.startswith("dflash") else 0
    M.block_size, M.ctx_len, M.window = c.bs, c.ctx, c.window


def make_inputs(c):
    t = {}
    t["q_base"], t["q4"], t["q_strides"] = make_tensor(c, c.Hq, c.Sq, c.layout)
    t["k_base"], t["k4"], t["k_strides"] = make_tensor(c, c.Hkv, c.Skv, c.layout)
    t["v_base"], t["v4"], t["v_strides"] = make_tensor(c, c.Hkv, c.Skv, c.layout)
    t["do_base"], t["do4"], t["do_strides"] = make_tensor(c, c.Hq, c.Sq, c.layout)
    for key in ("q", "k", "v", "do"):
        t[key] = t[key + "_base"]
    t["o"], t["o4"], t["o_strides"] = empty_like_layout(c, c.Hq, c.Sq, c.layout)
    t["dq"], t["dq4"], t["dq_strides"] = empty_like_layout(c, c.Hq, c.Sq, c.layout)
    t["dk"], t["dk4"], t["dk_strides"] = empty_like_layout(c, c.Hkv, c.Skv, c.layout)
    t["dv"], t["dv4"], t["dv_strides"] = empty_like_layout(c, c.Hkv, c.Skv, c.layout)
    t["lse"] = torch.full((c.B, c.Hq, c.Sq), math.nan, device="cuda", dtype=torch.float32)
    t["delta"] = torch.full((c.B, c.Hq, c.Sq), math.nan, device="cuda", dtype=torch.float32)
    # rows rounded up to the accumulator's 8 x 8 tiles (DqAccumRows in attention_params.cuh)
    t["dq_accum"] = torch.full((c.B, c.Hq, (c.Sq + 7) // 8 * 8, c.D), math.nan, device="cuda", dtype=torch.float32)
    if c.docs:
        t["cu"] = torch.tensor(c.docs, dtype=torch.int32, device="cuda")
    if c.mask.startswith("dflash"):
        t["anchors"] = torch.tensor(c.anchors, dtype=torch.int32, device="cuda")
        t["valid"] = torch.tensor(c.valid, dtype=torch.uint8, device="cuda")
        if c.doc_start is not None:
            t["doc_start"] = torch.tensor(c.doc_start, dtype=torch.int32, device="cuda")
    return t


def poison(t, fwd=True):
    keys = ("o", "lse") if fwd else ("dq", "dk", "dv", "delta", "dq_accum")
    for k in keys:
        t[k].fill_(math.nan)


def run_fwd(drv, c, t, cfg):
    D = c.D
    bm, bn, nw, st = cfg
    P = AttnParams()
    fill_params(c, P, t)
    name = mangle(*fwd_kernel(D, cfg, kernel_mask(c)))
    drv.launch(name, (c.Hq, math.ceil(c.Sq / bm), c.B), nw * 32, fwd_smem(D, bm, bn, st), P)  # attention_schedule.cuh
    return P


def run_bwd(drv, c, t, cfg):
    D = c.D
    bm, bn, st, dqm = cfg[:4]
    P = AttnParams()
    fill_params(c, P, t)
    ks = bwd_kernels(D, cfg, kernel_mask(c))
    pre_grid = (math.ceil(c.Sq / 32), c.Hq, c.B)
    drv.launch(mangle(*ks[0]), pre_grid, 128, 0, P)
    smem = bwd2d_smem(D, bm, bn, st) if ks[1][0] == "AttnBwdKv2d" else bwd_smem(D, bm, bn, st)
    drv.launch(mangle(*ks[1]), (c.Hkv, math.ceil(c.Skv / bn), c.B), bn // 16 * 32, smem, P)
    if dqm == 0:
        drv.launch(mangle(*ks[2]), pre_grid, 128, 0, P)
    else:
        drv.launch(mangle(*ks[2]), (c.Hq, math.ceil(c.Sq / bm), c.B), bm // 16 * 32, dq_smem(D, bm, 64, st), P)


def err(a, b, mask_rows=None):
    a, b = a.double(), b.double()
    if mask_rows is not None:
        a, b = a[mask_rows], b[mask_rows]
    if a.numel() == 0:
        return 0.0
    return (a - b).abs().max().item()


def check_case(drv, c, out_rows, seed):
    torch.manual_seed(seed)
    t = make_inputs(c)
    mask = dense_mask(c)
    scale = 1.0 / math.sqrt(c.D)
    ref = reference(t["q4"], t["k4"], t["v4"], t["do4"], mask, scale, torch.float64)
    pt = reference(t["q4"], t["k4"], t["v4"], t["do4"], mask, scale, torch.bfloat16)
    anyrow = mask.any(-1)[:, None].expand(c.B, c.Hq, c.Sq)  # [B,Hq,Sq]
    ok_all = True
    names = ["out", "lse", "dq", "dk", "dv"]
    for cfg in FWD_VARIANTS[c.D]:
        poison(t, True)
        run_fwd(drv, c, t, cfg)
        torch.cuda.synchronize()
        got = [t["o4"], t["lse"]]
        errs, ok = [], True
        for i in range(2):
            g = got[i].double()
            nan = torch.isnan(g).any().item()
            rows = anyrow if i == 1 else None
            e, e_pt = err(g, ref[i], rows), err(pt[i], ref[i], rows)
            good = (not nan) and e <= 2 * e_pt + 1e-4
            errs.append(f"{e:.2e}/{e_pt:.2e}{'' if good else ('!NaN' if nan else '!')}")
            ok &= good
        # rows that see nothing: output exactly 0, LSE exactly -inf
        dead = ~anyrow
        if dead.any():
            zero_ok = (t["o4"].double()[dead] == 0).all().item() and (t["lse"][dead] == -math.inf).all().item()
            ok &= zero_ok
            errs.append("empty rows " + ("0/-inf" if zero_ok else "WRONG"))
        labels = names[:2] + [""] * (len(errs) - 2)
        out_rows.append((c.name, "fwd " + ",".join(map(str, cfg)), ok,
                         " ".join(f"{n}={x}" if n else x for n, x in zip(labels, errs))))
        ok_all &= ok
    if not c.bwd:
        return ok_all
    # backward uses the forward's O and LSE of the first variant
    poison(t, True)
    run_fwd(drv, c, t, FWD_VARIANTS[c.D][0])
    for cfg in BWD_VARIANTS[c.D]:
        poison(t, False)
        run_bwd(drv, c, t, cfg)
        torch.cuda.synchronize()
        got = [t["dq4"], t["dk4"], t["dv4"]]
        errs, ok = [], True
        for i in range(3):
            g = got[i].double()
            nan = torch.isnan(g).any().item()
            e, e_pt = err(g, ref[2 + i]), err(pt[2 + i], ref[2 + i])
            good = (not nan) and e <= 2 * e_pt + 1e-4
            errs.append(f"{names[2 + i]}={e:.2e}/{e_pt:.2e}{'' if good else ('!NaN' if nan else '!')}")
            ok &= good
        dead = ~anyrow
        if dead.any():
            z = (t["dq4"].double()[dead] == 0).all().item()
            ok &= z
            errs.append("empty-row dq " + ("0" if z else "WRONG"))
        out_rows.append((c.name, "bwd " + ",".join(map(str, cfg)), ok, " ".join(errs)))
        ok_all &= ok
    return ok_all


def dflash_case(name, mask, B, Hq, Hkv, N, ctx, D, rng, invalid_tail=0, window=2048, layout="bshd", bwd=True,
                packed=False):
    """packed: per-block document starts (the start of the random document holding each anchor, cut points half
    on multiples of 64; one block in five an arbitrary value in [0, ctx + 16], also past the anchor)."""
    anchors, valid, doc_start = [], [], []
    for b in range(B):
        nv = N - invalid_tail
        a = sorted(rng.sample(range(1, ctx), nv)) + [0] * invalid_tail
        anchors.append(a)
        valid.append([1] * nv + [0] * invalid_tail)
        cuts = sorted([0] + [rng.randrange(1, ctx) // (64 if i % 2 else 1) * (64 if i % 2 else 1) for i in range(6)])
        doc_start.append([rng.randrange(0, ctx + 17) if rng.randrange(5) == 0 else max(x for x in cuts if x <= aj)
                          for aj in a])
    return Case(name, mask, B, Hq, Hkv, N * 16, ctx + N * 16, D, layout=layout, bs=16, ctx=ctx, anchors=anchors,
                valid=valid, window=window, bwd=bwd, doc_start=doc_start if packed else None)


def cases(quick):
    rng = random.Random(1234)
    cs = [
        Case("none g1 bshd", "none", 2, 4, 4, 200, 200, 64),
        Case("none s=1", "none", 1, 2, 2, 1, 1, 128, layout="bhsd"),
        Case("causal g4 bhsd", "causal", 1, 8, 2, 300, 300, 128, layout="bhsd"),
        Case("causal g6 q<kv", "causal", 1, 12, 2, 100, 333, 128),
        Case("causal g6 q>kv empty", "causal", 1, 6, 1, 333, 100, 64),
        Case("doc g4 pad rows", "doc", 1, 8, 2, 311, 311, 128, docs=[0, 37, 37, 150, 290]),
        Case("doc g1 d256 fwd", "doc", 2, 2, 2, 257, 257, 256, docs=[3, 64, 200, 257], bwd=False),
        Case("causal d256 fwd", "causal", 1, 24, 4, 517, 517, 256, bwd=False),
        dflash_case("dflash full g4", "dflash_full", 2, 8, 2, 21, 500, 128, rng, invalid_tail=3),
        dflash_case("dflash slide g4 w64", "dflash_sliding", 2, 8, 2, 21, 500, 128, rng, invalid_tail=3, window=64,
                    layout="bhsd"),
        dflash_case("dflash full g6 d64", "dflash_full", 1, 6, 1, 13, 300, 64, rng),
        dflash_case("dflash slide g1 w2048", "dflash_sliding", 1, 2, 2, 17, 3000, 128, rng, invalid_tail=2),
        dflash_case("dflash slide g4 w100 bs16", "dflash_sliding", 1, 4, 1, 40, 1500, 128, rng, window=100),
        dflash_case("dflash full g4 packed", "dflash_full", 2, 8, 2, 21, 500, 128, rng, invalid_tail=3, packed=True),
        dflash_case("dflash slide g4 w300 packed", "dflash_sliding", 1, 8, 2, 30, 900, 128, rng, window=300,
                    layout="bhsd", packed=True),
    ]
    if quick:
        cs = cs[:3] + cs[8:10]
    return cs


BENCH_FWD = [(64, 64, 4, 2), (128, 64, 8, 2), (128, 32, 4, 2), (128, 64, 4, 2)]
BENCH_BWD = [(64, 64, 1, 0), (64, 128, 1, 0), (64, 128, 1, 0, 2), (64, 128, 2, 0, 2), (64, 64, 1, 0, 2)]


def bench(drv, out, ours_only=False):
    """Side-by-side timings (not a tuned benchmark): our variants, compiled flex_attention (DFlash full layer) and
    SDPA's flash backend (dense causal), median of 10 after 3 warm-ups, useful FLOPs as in kernels.md."""
    rng = random.Random(7)
    res = []
    for mask in ("dflash_full",) if ours_only else ("dflash_full", "dflash_sliding"):
        c = dflash_case("bench " + mask, mask, 1, 32, 8, 512, 8192, 128, rng)
        t = make_inputs(c)
        pairs = dense_pairs(c)
        fl = 4.0 * pairs * 128 * 32
        for cfg in BENCH_FWD:
            tf = time_ms(lambda: run_fwd(drv, c, t, cfg))
            res.append(f"{mask:15s} ours fwd {cfg} {tf:.3f} ms {fl / tf / 1e9:.0f} TF/s")
        run_fwd(drv, c, t, BENCH_FWD[0])
        for cfg in BENCH_BWD:
            tb = time_ms(lambda: run_bwd(drv, c, t, cfg))
            res.append(f"{mask:15s} ours bwd {cfg} {tb:.3f} ms {2.5 * fl / tb / 1e9:.0f} TF/s")
        if mask == "dflash_full" and not ours_only:
            try:
                res += bench_flex(c, t, fl)
            except Exception as e:  # the comparison must not hide our numbers
                res.append(f"flex_attention failed: {type(e).__name__}: {e}"[:300])
        print("\n".join(res[-10:]), flush=True)
    c = Case("bench causal", "causal", 1, 32, 32, 8192, 8192, 128, layout="bhsd")
    t = make_inputs(c)
    fl = 4.0 * (8192 * 8193 / 2) * 128 * 32
    for cfg in BENCH_FWD:
        tf = time_ms(lambda: run_fwd(drv, c, t, cfg))
        res.append(f"causal 8192     ours fwd {cfg} {tf:.3f} ms {fl / tf / 1e9:.0f} TF/s")
    run_fwd(drv, c, t, BENCH_FWD[0])
    for cfg in BENCH_BWD:
        tb = time_ms(lambda: run_bwd(drv, c, t, cfg))
        res.append(f"causal 8192     ours bwd {cfg} {tb:.3f} ms {2.5 * fl / tb / 1e9:.0f} TF/s")
    if ours_only:
        return res
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        q = t["q4"].detach().clone().requires_grad_()
        k = t["k4"].detach().clone().requires_grad_()
        v = t["v4"].detach().clone().requires_grad_()
        do = t["do4"]
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            tf = time_ms(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            tb = time_ms(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True))
        res.append(f"causal 8192     SDPA flash fwd {tf:.3f} ms {fl / tf / 1e9:.0f} TF/s | bwd {tb:.3f} ms "
                   f"{2.5 * fl / tb / 1e9:.0f} TF/s")
    except Exception as e:
        res.append(f"SDPA flash failed: {type(e).__name__}: {e}"[:300])
    return res


def bench_flex(c, t, fl):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    anchors = torch.tensor(c.anchors[0], device="cuda", dtype=torch.int64)
    ctx, bs = c.ctx, c.bs

    def mask_mod(b, h, q_idx, kv_idx):
        j = q_idx // bs
        return (kv_idx < anchors[j]) | ((kv_idx >= ctx + j * bs) & (kv_idx < ctx + j * bs + bs))

    t0 = time.time()
    bm = create_block_mask(mask_mod, 1, None, c.Sq, c.Skv, device="cuda")
    fa = torch.compile(flex_attention)
    q = t["q4"].detach().contiguous().requires_grad_()
    k = t["k4"].detach().contiguous().requires_grad_()
    v = t["v4"].detach().contiguous().requires_grad_()
    do = t["do4"].contiguous()
    o = fa(q, k, v, block_mask=bm, enable_gqa=True)
    torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
    torch.cuda.synchronize()
    compile_s = time.time() - t0
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    tf = time_ms(lambda: fa(q, k, v, block_mask=bm, enable_gqa=True))
    o = fa(q, k, v, block_mask=bm, enable_gqa=True)
    tb = time_ms(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True))
    peak = (torch.cuda.max_memory_allocated() - base) / 2**30
    ours_ws = (t["delta"].numel() * 4 + t["dq_accum"].numel() * 4) / 2**30
    return [f"dflash_full     flex compiled fwd {tf:.3f} ms {fl / tf / 1e9:.0f} TF/s | bwd {tb:.3f} ms "
            f"{2.5 * fl / tb / 1e9:.0f} TF/s | peak extra {peak:.3f} GiB (ours: LSE + workspace {ours_ws:.3f} GiB) | "
            f"first call {compile_s:.1f} s"]


def dense_pairs(c):
    return int(dense_mask(c)[0].sum().item())


def time_ms(fn, reps=10):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/attention_check"))
    ap.add_argument("--build-dir", default="/tmp/attention_check_build", help="instantiation files and cubins")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--bench-ours", action="store_true", help="time our variants only (no flex / SDPA; DFlash full, causal)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.build_dir, exist_ok=True)
    cs = cases(args.quick)
    kernels = set()
    for c in cs:
        mk = kernel_mask(c)
        for cfg in FWD_VARIANTS[c.D]:
            kernels.add(fwd_kernel(c.D, cfg, mk))
        if c.bwd:
            for cfg in BWD_VARIANTS[c.D]:
                kernels.update(bwd_kernels(c.D, cfg, mk))
    if args.bench or args.bench_ours:
        for mk in (1, 3, 4):
            for cfg in BENCH_FWD:
                kernels.add(fwd_kernel(128, cfg, mk))
            for cfg in BENCH_BWD:
                kernels.update(bwd_kernels(128, cfg, mk))
    with open(os.path.join(args.out, "compile.log"), "w") as log:
        mods = compile_all(kernels, args.arch, args.build_dir, log)
    drv = Driver()
    for cub, names in mods:
        drv.load(cub, names)
    rows, all_ok = [], True
    for i, c in enumerate(cs):
        try:
            all_ok &= check_case(drv, c, rows, seed=1000 + i)
        except Exception as e:  # report and go on: one broken case must not hide the others
            rows.append((c.name, "-", False, f"EXCEPTION {e}"))
            all_ok = False
            torch.cuda.synchronize()
        print(f"case {c.name}: done", flush=True)
    with open(os.path.join(args.out, "check.txt"), "w") as f:
        for r in rows:
            f.write(f"{'PASS' if r[2] else 'FAIL'} | {r[0]:26s} | {r[1]:16s} | {r[3]}\n")
    bench_rows = bench(drv, args.out, ours_only=args.bench_ours) if args.bench or args.bench_ours else []
    print("\nresult | case | variant | kernel err / bf16-torch err (max abs vs fp64)")
    for r in rows:
        print(f"{'PASS' if r[2] else 'FAIL'} | {r[0]:26s} | {r[1]:16s} | {r[3]}")
    for b in bench_rows:
        print(b)
    print("ALL PASS" if all_ok else "SOME FAILED")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
