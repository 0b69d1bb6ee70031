#!/usr/bin/env python3
"""GPU correctness check (and rough stage timings) of the gdn kernels, for the device machine.

Compiles kernels/gdn/gdn_kernels.cu with NVRTC through CuPy, launches the kernels on torch tensors and compares
outputs and final states with a float64 token-by-token reference on fresh random inputs (outputs poisoned with
NaN first). Paths checked: chunked forward (sequential state pass), chunked forward with the state recurrence
split into segments (transfer maps + combine), both again with the fused state + output kernel
(gdn_chunk_fused), and the recurrent kernel; the chunked and recurrent results are
also compared with each other. Prints a table at the end; writes the full log to $OUT/gdn_check.log if OUT is set.

Usage: python3 tools/device/gdn_check.py [--quick] [--no-timing]
       python3 tools/device/gdn_check.py --sweep --cfgs '32,64,8;64,32,4'   (fused-path stage times)
       ncu ... python3 tools/device/gdn_check.py --profile --cfgs '32,64,8'  (one launch per stage)
"""
import argparse
import math
import os
import sys
import time

import cupy as cp
import numpy as np
import torch

# The mirror of kernels/gdn/gdn_layout.h (shared-memory sizes), checked against the header by a CPU test.
from gdn_layout import D, combine_smem, fused_smem, output_smem, prep_smem, state_smem

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# GDN_KDIR: another copy of kernels/gdn (e.g. a base commit's, for an A/B of the kernels in one device call)
KDIR = os.path.abspath(os.environ.get("GDN_KDIR") or os.path.join(ROOT, "kernels", "gdn"))
# The shared PTX wrappers the kernels include (a GDN_KDIR copy brings its own ../common when it has one).
COMMON_KDIR = os.path.join(os.path.dirname(KDIR), "common")
LOG = []


def log(msg):
    print(msg, flush=True)
    LOG.append(msg)


# --- compilation ----------------------------------------------------------------------------------------------
def sources_digest():
    """Digest of the kernel sources: part of the NVRTC source text, so CuPy's on-disk kernel cache (keyed by the
    text, not by the files it includes) never serves a kernel compiled from older sources."""
    import hashlib
    h = hashlib.sha256()
    for d in (KDIR, COMMON_KDIR):
        for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            if f.endswith((".cuh", ".cu", ".h")):
                with open(os.path.join(d, f), "rb") as fh:
                    h.update(f.encode() + fh.read())
    return h.hexdigest()[:16]


class Kernels:
    def __init__(self, C=64, BVS=32, BVO=64, NW=4, BVR=32, only=None):
        """only: compile just these stage keys (e.g. ("prepf", "fused", "fused2"))."""
        self.C, self.BVS, self.BVO, self.NW, self.BVR = C, BVS, BVO, NW, BVR
        self.names = {
            "prep": f"gdn::gdn_chunk_prep<{C}, {NW}, false>",
            "prepf": f"gdn::gdn_chunk_prep<{C}, {NW}, true>",
            "fused": f"gdn::gdn_chunk_fused<{C}, {BVS}, {NW}, 1>",
            "fused2": f"gdn::gdn_chunk_fused<{C}, {BVS}, {NW}, 2>",
            "state": f"gdn::gdn_chunk_state<{C}, {BVS}, {NW}, false>",
            "transfer": f"gdn::gdn_chunk_state<{C}, {BVS}, {NW}, true>",
            "combine": f"gdn::gdn_state_combine<{BVS}>",
            "output": f"gdn::gdn_chunk_output<{C}, {BVO}, {NW}>",
            "recurrent": f"gdn::gdn_recurrent<{BVR}>",
        }
        if only is not None:
            self.names = {k: v for k, v in self.names.items() if k in only}
        t = time.time()
        self.mod = cp.RawModule(
            code=f'// sources {sources_digest()}\n#include "gdn_kernels.cu"\n',
            backend="nvrtc",
            options=("-std=c++17", "-I/usr/local/cuda/include", "-I" + KDIR, "-I" + COMMON_KDIR),
            name_expressions=list(self.names.values()),
        )
        self.fn = {}
        smem = {
            "prep": prep_smem(C),
            "prepf": prep_smem(C),
            "fused": fused_smem(C, BVS, 1),
            "fused2": fused_smem(C, BVS, 2),
            "state": state_smem(C, BVS),
            "transfer": state_smem(C, BVS),
            "combine": combine_smem(BVS),
            "output": output_smem(C, BVO),
            "recurrent": 0,
        }
        self.smem = smem
        self.regs = {}  # registers per thread (and spilled bytes) of each compiled kernel
        for key, name in self.names.items():
            f = self.mod.get_function(name)
            self.regs[key] = f"{f.num_regs}" + (f"+{f.local_size_bytes}B local" if f.local_size_bytes else "")
            if smem[key] > 48 * 1024:
                f.max_dynamic_shared_size_bytes = smem[key]
            self.fn[key] = f
        self.tag = f"C{C}/S{BVS}/O{BVO}/W{NW}"
        log(f"compiled C={C} BVS={BVS} BVO={BVO} NW={NW} BVR={BVR} in {time.time() - t:.1f}s; smem " +
            ", ".join(f"{k}={v}" for k, v in smem.items()))

    def launch(self, key, grid, block, args):
        self.fn[key](grid, block, args, shared_mem=self.smem[key])


def P(t):
    return np.uint64(0 if t is None else t.data_ptr())


def I64(x):
    return np.int64(x)


def I32(x):
    return np.int32(x)


# --- host-side plan: mirrors kernels/gdn/chunk_plan.h ------------------------------------------------------
def make_plan(seqlens, C, seg_chunks):
    cu = [0]
    for L in seqlens:
        cu.append(cu[-1] + L)
    chunks, seq_first = [], []
    for n, L in enumerate(seqlens):
        seq_first.append(len(chunks))
        for t in range(cu[n], cu[n + 1], C):
            chunks.append((t, min(C, cu[n + 1] - t), n, 0))
    segs, seq_segs, seg_seq = [], [0], []
    for n, L in enumerate(seqlens):
        nch = (L + C - 1) // C
        if nch == 0:
            segs.append((cu[n], cu[n], seq_first[n], -1))
            seg_seq.append(n)
        for s in range(0, nch, seg_chunks):
            t0 = cu[n] + s * C
            t1 = min(cu[n + 1], cu[n] + (s + seg_chunks) * C)
            segs.append((t0, t1, seq_first[n] + s, -1))
            seg_seq.append(n)
        seq_segs.append(len(segs))
    return cu, chunks, segs, seq_segs, seg_seq


def dev_i32(x):
    return torch.tensor(np.array(x, dtype=np.int32).reshape(-1), device="cuda")


# --- the forward passes ------------------------------------------------------------------------------------
def prep_args(inp, chunks_d, gcum, w, u, kd, qg, pm):
    q, k, v, a, b, A_log, dt_bias = inp
    return (P(q), I64(q.stride(0)), I64(q.stride(1)), P(k), I64(k.stride(0)), I64(k.stride(1)),
            P(v), I64(v.stride(0)), I64(v.stride(1)), P(a), P(b), I64(a.stride(0)), P(A_log), P(dt_bias),
            P(None), P(None), P(chunks_d), I32(q.shape[1]), I32(v.shape[1]), I32(1), P(gcum), P(w), P(u), P(kd),
            np.float32(D ** -0.5),
            P(qg), P(pm), P(None))


def output_args(inp, gcum, hbuf, vnew, chunks_d, o):
    """gdn_chunk_output's arguments (q and k L2-normalised in the kernel)."""
    q, k, v = inp[:3]
    return (P(q), I64(q.stride(0)), I64(q.stride(1)), P(k), I64(k.stride(0)), I64(k.stride(1)),
            P(gcum), P(hbuf), P(vnew), P(chunks_d), I32(q.shape[1]), I32(v.shape[1]), I32(1), np.float32(D ** -0.5),
            P(o), I64(o.stride(0)), I64(o.stride(1)))


def run_chunked(K, inp, seqlens, h0, want_ht, seg_chunks=None, fused=False):
    q, k, v, a, b, A_log, dt_bias = inp
    T, H, _ = q.shape
    HV = v.shape[1]
    C = K.C
    N = len(seqlens)
    split = seg_chunks is not None
    cu, chunks, segs, seq_segs, seg_seq = make_plan(seqlens, C, seg_chunks if split else 1 << 30)
    nchunks, nseg = len(chunks), len(segs)
    chunks_d = dev_i32(chunks)
    gcum = torch.full((T, HV), float("nan"), device="cuda", dtype=torch.float32)
    w = torch.full((T, HV, D), float("nan"), device="cuda", dtype=torch.bfloat16)
    u = torch.full_like(w, float("nan"))
    kd = torch.full_like(w, float("nan"))
    vnew = torch.full_like(w, float("nan"))
    hbuf = torch.full((max(nchunks, 1), HV, D, D), float("nan"), device="cuda", dtype=torch.bfloat16)
    qg = torch.full_like(w, float("nan")) if fused else None
    pm = torch.full((max(nchunks, 1), HV, C, C), float("nan"), device="cuda", dtype=torch.bfloat16) if fused else None
    o = torch.full((T, HV, D), float("nan"), device="cuda", dtype=torch.bfloat16)
    ht = torch.full((N, HV, D, D), float("nan"), device="cuda", dtype=torch.float32) if want_ht else None
    NT = K.NW * 32
    if nchunks:
        K.launch("prepf" if fused else "prep", (nchunks, HV), (NT,), prep_args(inp, chunks_d, gcum, w, u, kd, qg, pm))
    if not split:
        segs = [(s[0], s[1], s[2], n if h0 is not None else -1) for n, s in enumerate(segs)]
        ht_idx = list(range(N))
        state0 = h0
    else:
        X = torch.full((nseg, HV, D, 2 * D), float("nan"), device="cuda", dtype=torch.float32)
        segs_d = dev_i32(segs)
        K.launch("transfer", (2 * D // K.BVS, HV, nseg), (NT,),
                 (P(kd), P(w), P(u), P(gcum), P(segs_d), np.uint64(0), I32(HV), np.uint64(0), P(X),
                  np.uint64(0), np.uint64(0)))
        state0 = torch.full((nseg, HV, D, D), float("nan"), device="cuda", dtype=torch.float32)
        K.launch("combine", (D // K.BVS, HV, N), (D,),
                 (P(X), P(dev_i32(seq_segs)), I32(HV), P(h0), P(state0)))
        segs = [(s[0], s[1], s[2], i) for i, s in enumerate(segs)]
        ht_idx = [seg_seq[i] if (i + 1 == nseg or seg_seq[i + 1] != seg_seq[i]) else -1 for i in range(nseg)]
    segs_d = dev_i32(segs)
    if fused:
        K.launch("fused2" if fused == 2 else "fused", (D // K.BVS, HV, nseg), (NT,),
                 (P(kd), P(w), P(u), P(qg), P(pm), P(gcum), P(segs_d), P(dev_i32(ht_idx)), I32(HV), P(state0),
                  P(ht), P(o), I64(o.stride(0)), I64(o.stride(1))) + FUSED_FOLD_UNUSED)
        return o, ht
    K.launch("state", (D // K.BVS, HV, nseg), (NT,),
             (P(kd), P(w), P(u), P(gcum), P(segs_d), P(dev_i32(ht_idx)), I32(HV), P(state0), P(ht), P(hbuf),
              P(vnew)))
    if nchunks:
        K.launch("output", (D // K.BVO, nchunks, HV), (NT,), output_args(inp, gcum, hbuf, vnew, chunks_d, o))
    return o, ht


def run_recurrent(K, inp, seqlens, h0, want_ht):
    q, k, v, a, b, A_log, dt_bias = inp
    T, H, _ = q.shape
    HV = v.shape[1]
    N = len(seqlens)
    cu = np.concatenate([[0], np.cumsum(seqlens)]).astype(np.int32)
    o = torch.full((T, HV, D), float("nan"), device="cuda", dtype=torch.bfloat16)
    ht = torch.full((N, HV, D, D), float("nan"), device="cuda", dtype=torch.float32) if want_ht else None
    K.launch("recurrent", (D // K.BVR, HV, N), (2 * K.BVR,),
             (P(q), I64(q.stride(0)), I64(q.stride(1)), P(k), I64(k.stride(0)), I64(k.stride(1)),
              P(v), I64(v.stride(0)), I64(v.stride(1)), P(a), P(b), I64(a.stride(0)), P(A_log), P(dt_bias),
              P(None), P(None), P(dev_i32(cu)), I32(H), I32(HV), I32(1), np.float32(D ** -0.5), P(h0), P(ht),
              P(o), I64(o.stride(0)), I64(o.stride(1))))
    return o, ht


# gdn_chunk_fused's trailing arguments that only its FOLD form reads (q, k, v with strides, H, rowscale).
FUSED_FOLD_UNUSED = (np.uint64(0), I64(0), I64(0)) * 3 + (I32(1), np.uint64(0))


def reference(inp, seqlens, h0):
    """float64 token-by-token gated delta rule, straight from the spec (dflash-training.md section 1)."""
    q, k, v, a, b, A_log, dt_bias = [x.double() for x in inp]
    T, H, _ = q.shape
    HV = v.shape[1]
    r = HV // H
    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) * D ** -0.5
    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    q = q.repeat_interleave(r, dim=1)  # value head j uses key head j // r
    k = k.repeat_interleave(r, dim=1)
    g = -torch.exp(A_log)[None, :] * torch.nn.functional.softplus(a + dt_bias[None, :])
    beta = torch.sigmoid(b)
    o = torch.zeros(T, HV, D, dtype=torch.float64, device=q.device)
    hts = []
    t0 = 0
    for n, L in enumerate(seqlens):
        S = h0[n].double().clone() if h0 is not None else torch.zeros(HV, D, D, dtype=torch.float64, device=q.device)
        for t in range(t0, t0 + L):
            S = S * torch.exp(g[t])[:, None, None]
            kv = torch.einsum("hkv,hk->hv", S, k[t])
            uu = beta[t][:, None] * (v[t] - kv)
            S = S + k[t][:, :, None] * uu[:, None, :]
            o[t] = torch.einsum("hkv,hk->hv", S, q[t])
        hts.append(S)
        t0 += L
    return o, torch.stack(hts)


def make_inputs(seqlens, H, HV, seed, strided=False):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    T = sum(seqlens)

    def rn(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, generator=gen, device="cuda", dtype=torch.float32).to(dtype)

    if strided:  # q, k, v as views of one [T, 2*H*D + HV*D] projection, as the layer produces them
        qkv = rn(T, (2 * H + HV) * D)
        q = qkv[:, : H * D].view(T, H, D)
        k = qkv[:, H * D: 2 * H * D].view(T, H, D)
        v = qkv[:, 2 * H * D:].view(T, HV, D)
    else:
        q, k, v = rn(T, H, D), rn(T, H, D), rn(T, HV, D)
    a = rn(T, HV)
    b = rn(T, HV)
    # as the Qwen3.5 layer initialises them: A ~ U(0, 16), dt ~ logU(1e-3, 1e-1), dt_bias = softplus^-1(dt)
    A_log = torch.log(torch.empty(HV, device="cuda").uniform_(0.5, 16, generator=gen))
    dt = torch.exp(torch.empty(HV, device="cuda").uniform_(math.log(1e-3), math.log(1e-1), generator=gen))
    dt_bias = torch.log(torch.expm1(dt))
    return (q, k, v, a, b, A_log, dt_bias)


def rel(x, ref):
    x = x.double()
    if torch.isnan(x).any():
        return float("nan")
    return ((x - ref).norm() / ref.norm().clamp_min(1e-30)).item()


RESULTS = []


def check_case(Ks, name, seqlens, H, HV, with_h0, seg_chunks, seed, strided=False):
    """One problem, fresh inputs; the float64 reference once, then every kernel configuration in Ks."""
    inp = make_inputs(seqlens, H, HV, seed, strided)
    N = len(seqlens)
    h0 = None
    if with_h0:
        gen = torch.Generator(device="cuda").manual_seed(seed + 1)
        h0 = torch.randn(N, HV, D, D, generator=gen, device="cuda") * 0.1
    ref_o, ref_h = reference(inp, seqlens, h0)
    for K in Ks:
        o_c, h_c = run_chunked(K, inp, seqlens, h0, True)
        o_s, h_s = run_chunked(K, inp, seqlens, h0, True, seg_chunks=seg_chunks)
        o_f, h_f = run_chunked(K, inp, seqlens, h0, True, fused=True)
        o_fs, h_fs = run_chunked(K, inp, seqlens, h0, True, seg_chunks=seg_chunks, fused=True)
        o_f2, h_f2 = run_chunked(K, inp, seqlens, h0, True, fused=2)
        o_r, h_r = run_recurrent(K, inp, seqlens, h0, True)
        torch.cuda.synchronize()
        row = dict(case=f"{name} [{K.tag}]", o_chunk=rel(o_c, ref_o), h_chunk=rel(h_c, ref_h),
                   o_split=rel(o_s, ref_o), h_split=rel(h_s, ref_h), o_fused=rel(o_f, ref_o), h_fused=rel(h_f, ref_h),
                   o_fsplit=rel(o_fs, ref_o), h_fsplit=rel(h_fs, ref_h), o_f2=rel(o_f2, ref_o), h_f2=rel(h_f2, ref_h),
                   o_rec=rel(o_r, ref_o), h_rec=rel(h_r, ref_h),
                   chunk_vs_rec=rel(o_c, o_r.double()))
        tol_c, tol_r = 2e-2, 5e-3
        ok = all(row[x] <= tol_c for x in ("o_chunk", "h_chunk", "o_split", "h_split", "o_fused", "h_fused",
                                           "o_fsplit", "h_fsplit", "o_f2", "h_f2", "chunk_vs_rec")) and \
            all(row[x] <= tol_r for x in ("o_rec", "h_rec"))
        row["ok"] = ok
        RESULTS.append(row)
        log(f"{row['case']:52s} " + " ".join(f"{k}={row[k]:.2e}" for k in row if k not in ("case", "ok")) +
            ("  PASS" if ok else "  FAIL"))


def time_fn(fn, reps=7, inner=10, sleep_cycles=0):
    """Median over `reps` of (events around `inner` back-to-back calls) / inner. With sleep_cycles, the GPU
    spins first so the host has queued every launch before the first event: host overhead stays out."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if sleep_cycles:
            torch.cuda._sleep(sleep_cycles)
        s.record()
        for _ in range(inner):
            fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) / inner)
    return float(np.median(ts))


def timing(K, H, HV, seqlens, seg_chunks):
    inp = make_inputs(seqlens, H, HV, 7, strided=True)
    t_c = time_fn(lambda: run_chunked(K, inp, seqlens, None, True), reps=5, inner=1)
    t_s = time_fn(lambda: run_chunked(K, inp, seqlens, None, True, seg_chunks=seg_chunks), reps=5, inner=1)
    t_r = time_fn(lambda: run_recurrent(K, inp, seqlens, None, True), reps=3, inner=1)
    T = sum(seqlens)
    log(f"timing ({H},{HV}) {len(seqlens)}x{seqlens[0]}: chunked {t_c:.3f} ms, split(seg={seg_chunks}) "
        f"{t_s:.3f} ms ({T / t_s / 1e3:.2f} Mtok/s), recurrent {t_r:.3f} ms  [host allocs + launches included]")


def stage_timing(K, H, HV, L, seg_chunks, once=False, keys=None):
    """CUDA-event times of each stage alone at one shape (inputs prepared once); once: launch each stage once,
    untimed (for a profiler). keys: only these stages (names of the table below); returns {stage: ms}."""
    seqlens = [L]
    inp = make_inputs(seqlens, H, HV, 11, strided=True)
    q, k, v, a, b, A_log, dt_bias = inp
    T = L
    C = K.C
    cu, chunks, segs, seq_segs, seg_seq = make_plan(seqlens, C, seg_chunks)
    nchunks, nseg = len(chunks), len(segs)
    chunks_d = dev_i32(chunks)
    gcum = torch.empty((T, HV), device="cuda")
    w = torch.empty((T, HV, D), device="cuda", dtype=torch.bfloat16)
    u, vnew, kd = torch.empty_like(w), torch.empty_like(w), torch.empty_like(w)
    hbuf = torch.empty((nchunks, HV, D, D), device="cuda", dtype=torch.bfloat16)
    qg = torch.empty_like(w)
    pm = torch.empty((nchunks, HV, C, C), device="cuda", dtype=torch.bfloat16)
    o = torch.empty_like(w)
    X = torch.empty((nseg, HV, D, 2 * D), device="cuda")
    st = torch.empty((nseg, HV, D, D), device="cuda")
    ht = torch.empty((1, HV, D, D), device="cuda")
    NT = K.NW * 32
    seq_segs_d = dev_i32(seq_segs)
    segs_split = dev_i32([(s[0], s[1], s[2], i) for i, s in enumerate(segs)])
    ht_split = dev_i32([0 if i + 1 == nseg else -1 for i in range(nseg)])
    segs_seq = dev_i32([(0, L, 0, -1)])
    ht_seq = dev_i32([0])
    segs_plain_d = dev_i32(segs)
    stages = {
        "prep": lambda: K.launch("prep", (nchunks, HV), (NT,), prep_args(inp, chunks_d, gcum, w, u, kd, None, None)),
        "prep(fused)": lambda: K.launch("prepf", (nchunks, HV), (NT,), prep_args(inp, chunks_d, gcum, w, u, kd, qg, pm)),
        "fused(seq)": lambda: K.launch("fused", (D // K.BVS, HV, 1), (NT,),
                                       (P(kd), P(w), P(u), P(qg), P(pm), P(gcum), P(segs_seq), P(ht_seq), I32(HV),
                                        np.uint64(0), P(ht), P(o), I64(o.stride(0)), I64(o.stride(1)))
                                       + FUSED_FOLD_UNUSED),
        "fused2(seq)": lambda: K.launch("fused2", (D // K.BVS, HV, 1), (NT,),
                                        (P(kd), P(w), P(u), P(qg), P(pm), P(gcum), P(segs_seq), P(ht_seq), I32(HV),
                                         np.uint64(0), P(ht), P(o), I64(o.stride(0)), I64(o.stride(1)))
                                        + FUSED_FOLD_UNUSED),
        "fused(split)": lambda: K.launch("fused", (D // K.BVS, HV, nseg), (NT,),
                                         (P(kd), P(w), P(u), P(qg), P(pm), P(gcum), P(segs_split), P(ht_split),
                                          I32(HV), P(st), P(ht), P(o), I64(o.stride(0)), I64(o.stride(1)))
                                         + FUSED_FOLD_UNUSED),
        "state(seq)": lambda: K.launch("state", (D // K.BVS, HV, 1), (NT,),
                                       (P(kd), P(w), P(u), P(gcum), P(segs_seq), P(ht_seq), I32(HV), np.uint64(0),
                                        P(ht), P(hbuf), P(vnew))),
        "transfer": lambda: K.launch("transfer", (2 * D // K.BVS, HV, nseg), (NT,),
                                     (P(kd), P(w), P(u), P(gcum), P(segs_plain_d), np.uint64(0), I32(HV),
                                      np.uint64(0), P(X), np.uint64(0), np.uint64(0))),
        "combine": lambda: K.launch("combine", (D // K.BVS, HV, 1), (D,),
                                    (P(X), P(seq_segs_d), I32(HV), np.uint64(0), P(st))),
        "state(split)": lambda: K.launch("state", (D // K.BVS, HV, nseg), (NT,),
                                         (P(kd), P(w), P(u), P(gcum), P(segs_split), P(ht_split), I32(HV),
                                          P(st), P(ht), P(hbuf), P(vnew))),
        "output": lambda: K.launch("output", (D // K.BVO, nchunks, HV), (NT,),
                                   output_args(inp, gcum, hbuf, vnew, chunks_d, o)),
    }
    if keys is not None:
        stages = {k: v for k, v in stages.items() if k in keys}
    if once:
        for fn in stages.values():
            fn()
        torch.cuda.synchronize()
        return None
    times = {name: time_fn(fn, sleep_cycles=4_000_000) for name, fn in stages.items()}
    if keys is not None:
        return times
    split_total = times["prep"] + times["transfer"] + times["combine"] + times["state(split)"] + times["output"]
    seq_total = times["prep"] + times["state(seq)"] + times["output"]
    fused_seq = times["prep(fused)"] + times["fused(seq)"]
    fused_split = times["prep(fused)"] + times["transfer"] + times["combine"] + times["fused(split)"]
    fused2_seq = times["prep(fused)"] + times["fused2(seq)"]
    log(f"stages [{K.tag}] ({H},{HV}) 1x{L} seg={seg_chunks}: " + ", ".join(f"{k} {v:.3f}" for k, v in times.items()) +
        f" | sequential total {seq_total:.3f} ms, split total {split_total:.3f} ms, fused sequential "
        f"{fused_seq:.3f} ms, fused split {fused_split:.3f} ms, fused 2-stage sequential {fused2_seq:.3f} ms")
    return times


FUSED_KEYS = ("prepf", "fused", "fused2")
FUSED_STAGES = ("prep(fused)", "fused(seq)", "fused2(seq)")


def parse_cfgs(text):
    """'32,64,8;64,32,4' -> [(C, BV, warps), ...]"""
    return [tuple(int(x) for x in c.split(",")) for c in text.split(";") if c]


def compile_only(kwargs):
    Kernels(**kwargs)
    return kwargs


def precompile(kwargs_list):
    """Compiles each Kernels(**kwargs) in its own process, all at once: CuPy's disk cache then serves them."""
    import concurrent.futures as cf
    import multiprocessing as mp
    t = time.time()
    with cf.ProcessPoolExecutor(max_workers=min(len(kwargs_list), os.cpu_count() or 4),
                                mp_context=mp.get_context("spawn")) as ex:
        list(ex.map(compile_only, kwargs_list))
    log(f"{len(kwargs_list)} variants compiled in parallel in {time.time() - t:.1f}s")


def sweep(cfgs, H, HV, L):
    """Stage times of the fused path (prep(fused), fused 1 and 2 stages) for each (C, BV, warps) at (H, HV) 1xL.
    The variants compile first in parallel processes (CuPy's disk cache), then time one after the other."""
    precompile([dict(C=c[0], BVS=c[1], BVO=64, NW=c[2], only=FUSED_KEYS) for c in cfgs])
    rows = []
    for cfg in cfgs:
        K = Kernels(C=cfg[0], BVS=cfg[1], BVO=64, NW=cfg[2], only=FUSED_KEYS)
        times = stage_timing(K, H, HV, L, 16, keys=FUSED_STAGES)
        rows.append((cfg, times, K.regs))
        log(f"sweep ({H},{HV}) 1x{L} C{cfg[0]}/BV{cfg[1]}/W{cfg[2]}: " +
            ", ".join(f"{k} {v:.3f}" for k, v in times.items()) +
            f" | fused-1 total {times['prep(fused)'] + times['fused(seq)']:.3f}, fused-2 total "
            f"{times['prep(fused)'] + times['fused2(seq)']:.3f} ms | regs " +
            ", ".join(f"{k} {v}" for k, v in K.regs.items()))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true",
                    help="two configs (the default; chunk 32 / 64 columns / 8 warps), no 8192-token cases")
    ap.add_argument("--configs", type=int, default=4, help="how many kernel configurations to check")
    ap.add_argument("--long", type=int, default=2, help="how many 8192-token cases to run (0-2)")
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--profile", action="store_true",
                    help="only launch the fused path's stages (prep(fused), fused 1 and 2 stages) once at (16,48) "
                         "1x8192 for the --cfgs configs (run under ncu)")
    ap.add_argument("--sweep", action="store_true",
                    help="only time the fused path's stages at (16,48) 1x8192 for each of --cfgs")
    ap.add_argument("--cfgs", default="32,64,8", help="C,BV,warps[;C,BV,warps...] for --profile / --sweep")
    ap.add_argument("--shape", default="16,48,8192", help="H,HV,L for --profile / --sweep")
    args = ap.parse_args()
    torch.manual_seed(0)
    H, HV, L = (int(x) for x in args.shape.split(","))
    if args.profile:
        for cfg in parse_cfgs(args.cfgs):
            K = Kernels(C=cfg[0], BVS=cfg[1], BVO=64, NW=cfg[2], only=FUSED_KEYS)
            stage_timing(K, H, HV, L, 16, once=True, keys=FUSED_STAGES)
        return 0
    if args.sweep:
        sweep(parse_cfgs(args.cfgs), H, HV, L)
        out = os.environ.get("OUT")
        if out:
            with open(os.path.join(out, "gdn_sweep.log"), "a") as f:
                f.write("\n".join(LOG) + "\n")
        return 0
    log(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  cupy {cp.__version__}")
    geoms = [dict(C=64, BVS=32, BVO=64), dict(C=64, BVS=16, BVO=64), dict(C=64, BVS=32, BVO=32),
             dict(C=32, BVS=32, BVO=32)]
    # --quick: the default geometry and the (16,48) 1x8192 winner's (chunk 32, 64 state columns, 8 warps)
    quick = [geoms[0], dict(C=32, BVS=64, BVO=64, NW=8)]
    chosen = quick if args.quick else geoms[:max(1, args.configs)]
    precompile(chosen)
    Ks = [Kernels(**g) for g in chosen]
    seed = int(time.time()) % 100000  # fresh inputs every run; printed so a failure can be replayed
    log(f"seed base {seed}")
    cases = []
    for r in (1, 2, 3):
        for L in (1, 63, 64, 65, 1000):
            cases.append((f"single L={L} H=2 HV={2 * r}", [L], 2, 2 * r, L % 2 == 1, 4, False))
    cases.append(("packed [1,63,64,65,1000,130] r=3 h0", [1, 63, 64, 65, 1000, 130], 2, 6, True, 3, True))
    cases.append(("packed [700,0,5,64,129] r=2", [700, 0, 5, 64, 129], 4, 8, False, 2, True))
    longs = [("single L=8192 (16,48) strided", [8192], 16, 48, False, 16, True),
             ("single L=8192 (16,48) h0", [8192], 16, 48, True, 8, True)]
    if not args.quick:
        cases += longs[:args.long]
    for i, c in enumerate(cases):
        try:
            check_case(Ks, c[0], c[1], c[2], c[3], c[4], c[5], seed + 17 * i, strided=c[6])
        except Exception as e:  # report and go on: the table shows what ran
            log(f"{c[0]:52s} ERROR {type(e).__name__}: {e}")
            RESULTS.append(dict(case=c[0], ok=False))
    if not args.no_timing:
        try:
            # the chunk-32 / 8-warp geometry the tuner picked for (16, 48) 1x8192 in the first side-by-side run
            for K in Ks:
                stage_timing(K, 16, 48, 8192, 16)
            stage_timing(Ks[0], 16, 32, 8192, 16)
        except Exception as e:
            log(f"timing ERROR {type(e).__name__}: {e}")
    n_ok = sum(1 for r in RESULTS if r.get("ok"))
    log(f"SUMMARY: {n_ok}/{len(RESULTS)} cases pass")
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "gdn_check.log"), "w") as f:
            f.write("\n".join(LOG) + "\n")
    return 0 if n_ok == len(RESULTS) else 1


if __name__ == "__main__":
    sys.exit(main())
