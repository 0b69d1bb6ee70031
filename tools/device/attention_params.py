#!/usr/bin/env python3
"""The Python mirror of kernels/attention/attention_params.cuh that tools/device/attention_check.py launches the
kernels with: the structs the kernels take by value (ctypes), the mask constants, the tile-class table's capacity
and the dynamic shared memory of each kernel. Plain Python (ctypes only), so a CPU test can import it.

tests/kernels/attention/attention_params_mirror_test.cc (CTest label cpu) runs this file as a script, which prints
the mirror as JSON (every field's name, offset and size, the constants, the shared-memory sizes over a grid of
shapes), and compares it with the C++ header: a field added, removed, resized or reordered on one side only, or a
constant or formula changed on one side only, fails that test.
"""
import ctypes
import json
import sys


class MaskParams(ctypes.Structure):
    _fields_ = [("cu_seqlens", ctypes.c_void_p), ("anchors", ctypes.c_void_p), ("block_valid", ctypes.c_void_p),
                ("doc_start", ctypes.c_void_p),
                ("kind", ctypes.c_int), ("seq_q", ctypes.c_int), ("seq_kv", ctypes.c_int), ("num_docs", ctypes.c_int),
                ("num_blocks", ctypes.c_int), ("block_size", ctypes.c_int), ("ctx_len", ctypes.c_int),
                ("window", ctypes.c_int)]


_STRIDES = [f"{t}_{s}_stride" for t in ("q", "k", "v", "o", "do", "dq", "dk", "dv") for s in ("batch", "head", "seq")]


class AttnParams(ctypes.Structure):
    _fields_ = ([(n, ctypes.c_void_p) for n in ("q", "k", "v", "o", "lse", "dout", "dq", "dk", "dv", "delta",
                                                  "dq_accum")] +
                [(n, ctypes.c_longlong) for n in _STRIDES] +
                [("batch", ctypes.c_int), ("heads_q", ctypes.c_int), ("heads_kv", ctypes.c_int),
                 ("head_dim", ctypes.c_int), ("scale", ctypes.c_float), ("pad0", ctypes.c_int),
                 ("mask", MaskParams)])


MASKS = {"none": 0, "causal": 1, "doc": 2, "dflash_full": 3, "dflash_sliding": 4}  # MaskKind
NUM_MASK_KINDS = 5
MASK_DOC_BOUND = 8  # kMaskDocBound: the kernels' MASK argument of a packed-rows (doc_start) case
MAX_TILES = 1024  # kMaxTiles


def fwd_smem(d, bm, bn, st):
    return (bm * d + 2 * st * bn * d) * 2 + bm * 16 + MAX_TILES


def bwd_smem(d, bm, bn, st):
    return (2 * bn * d + 2 * st * bm * d + bm * bn) * 2 + st * bm * 24 + MAX_TILES


def bwd2d_smem(d, bm, bn, st):
    return (2 * bn * d + 2 * st * bm * d + 2 * bm * bn) * 2 + st * bm * 24 + MAX_TILES


def dq_smem(d, bm, bn, st):
    return (2 * bm * d + 2 * st * bn * d) * 2 + MAX_TILES


# The shapes the test compares the formulas at (the same grid on the C++ side).
SMEM_GRID = [(d, bm, bn, st) for d in (64, 128, 256) for bm in (16, 32, 64, 128) for bn in (16, 32, 64, 128)
             for st in (1, 2)]


def describe():
    def layout(struct):
        return {"size": ctypes.sizeof(struct),
                "fields": [[name, getattr(struct, name).offset, getattr(struct, name).size]
                           for name, _ in struct._fields_]}
    return {
        "structs": {"MaskParams": layout(MaskParams), "AttnParams": layout(AttnParams)},
        "constants": dict({f"mask_{k}": v for k, v in MASKS.items()}, num_mask_kinds=NUM_MASK_KINDS,
                          mask_doc_bound=MASK_DOC_BOUND, max_tiles=MAX_TILES),
        "smem": {name: [f(*g) for g in SMEM_GRID]
                 for name, f in (("fwd", fwd_smem), ("bwd", bwd_smem), ("bwd2d", bwd2d_smem), ("dq", dq_smem))},
    }


if __name__ == "__main__":
    json.dump(describe(), sys.stdout)
    sys.stdout.write("\n")
