#!/usr/bin/env python3
"""The Python mirror of kernels/gdn/gdn_layout.h that tools/device/gdn_check.py launches the kernels with: the head
dimension, the padded row widths and the dynamic shared memory of each gdn kernel. Plain Python, so a CPU test can
import it.

tests/kernels/gdn/gdn_layout_mirror_test.cc (CTest label cpu) runs this file as a script, which prints the mirror as
JSON (the constants and every formula over a grid of shapes), and compares it with the C++ header: a formula or
constant changed on one side only fails that test.
"""
import json
import sys

D = 128  # kDim: K = V


def pad_b(c):  # PadBf16Cols
    return c + 8


def pad_f(c):  # PadF32Cols
    return c + 4


def prep_t_region(c):  # PrepTRegionBytes: Tw and Tu in bf16, L in fp32 before them over the same bytes
    return 2 * c * pad_b(c) * 2


def prep_smem(c):
    return 2 * c * pad_b(D) * 2 + prep_t_region(c) + 4 * c * 4


def state_smem(c, bv):
    return D * pad_f(bv) * 4 + D * pad_b(bv) * 2 + 2 * c * pad_b(D) * 2 + 2 * c * pad_b(bv) * 2


def output_smem(c, bv):
    return 2 * c * pad_b(D) * 2 + c * pad_f(max(c, bv)) * 4 + D * pad_b(bv) * 2 + c * pad_b(bv) * 2 + c * 4


def fused_smem(c, bv, stages):
    return D * pad_b(bv) * 2 + c * pad_b(bv) * 2 + stages * (3 * c * pad_b(D) * 2 + c * pad_b(c) * 2 + c * pad_b(bv) * 2)


def combine_smem(bv):
    return D * (D + 1) * 4 + D * bv * 4


# The shapes the test compares the formulas at (the same grid on the C++ side): chunks and column slices of the
# tuning space and beyond it.
CHUNKS = (16, 32, 64, 128)
COLUMNS = (16, 32, 64, 128)


def describe():
    return {
        "constants": {"dim": D},
        "pad_bf16": [pad_b(c) for c in CHUNKS + COLUMNS],
        "pad_f32": [pad_f(c) for c in CHUNKS + COLUMNS],
        "prep": [prep_smem(c) for c in CHUNKS],
        "state": [state_smem(c, bv) for c in CHUNKS for bv in COLUMNS],
        "output": [output_smem(c, bv) for c in CHUNKS for bv in COLUMNS],
        "fused": [fused_smem(c, bv, st) for c in CHUNKS for bv in COLUMNS for st in (1, 2)],
        "combine": [combine_smem(bv) for bv in COLUMNS],
    }


if __name__ == "__main__":
    json.dump(describe(), sys.stdout)
    sys.stdout.write("\n")
