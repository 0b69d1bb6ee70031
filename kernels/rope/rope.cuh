// Rotary position embedding of bf16 heads with fp32 tables, the neox layout of Qwen3 / Qwen3.5 (HF's rotate_half):
// for i < R/2 (R = ROTARY, the rotated leading part of each head; the rest is copied through)
//   y[i]       = x[i] * cos[t, i]           + (-x[i + R/2]) * (sign * sin[t, i])
//   y[i + R/2] = x[i + R/2] * cos[t, i + R/2] + x[i] * (sign * sin[t, i + R/2])
// in fp32, each product and the sum rounded separately (no fused multiply-add: __fmul_rn / __fadd_rn), then rounded
// to bf16 (nearest even): with sign = +1 that is LibTorch's fp32 `rot * cos + rotate_half(rot) * sin` cast to bf16
// (trainer/nn/layers.cc ApplyRope) bit for bit. sign = -1 rotates by -theta, the transpose: the backward of the
// forward (dx from dy).
// Owns: the CUDA kernel of the rope family (NVRTC; free of host headers). One template per (head dim, rotary dim,
// vector width, block size): each work item is VEC pairs (x[i..], x[i + R/2 ..]) of one head, or VEC elements of
// its unrotated tail; items are walked grid-stride, ITEMS_PER_THREAD per thread on average.
// Thread-safety: n/a (device code).
#pragma once

#include "bf16_vec.cuh"
#include "rope_params.h"

namespace dflash_rope {

using dflash_bf16::Pack;

// VEC fp32 table entries (16-byte aligned) through the read-only path.
template <int VEC>
__device__ __forceinline__ void load_table(const float* p, float (&t)[VEC]) {
#pragma unroll
  for (int q = 0; q < VEC / 4; ++q) {
    const float4 f = __ldg(reinterpret_cast<const float4*>(p) + q);
    t[4 * q] = f.x, t[4 * q + 1] = f.y, t[4 * q + 2] = f.z, t[4 * q + 3] = f.w;
  }
}

template <int HEAD_DIM, int ROTARY, int VEC, int THREADS>
__global__ void __launch_bounds__(THREADS) rope(const RopeParams p) {
  static_assert(ROTARY >= 2 * VEC && ROTARY % (2 * VEC) == 0, "the rotated half splits into whole vectors");
  static_assert(ROTARY <= HEAD_DIM && (HEAD_DIM - ROTARY) % VEC == 0, "the unrotated tail splits into whole vectors");
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps, at most 1024 threads");
  constexpr int HALF = ROTARY / 2;
  constexpr int PAIRS = HALF / VEC;
  constexpr int ITEMS = PAIRS + (HEAD_DIM - ROTARY) / VEC;  // per head
  const long long heads = static_cast<long long>(p.tokens) * p.heads;
  const long long total = heads * ITEMS;
  for (long long i = static_cast<long long>(blockIdx.x) * THREADS + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * THREADS) {
    const int item = static_cast<int>(i % ITEMS);
    const long long th = i / ITEMS;  // token * heads + head
    const long long t = th / p.heads;
    const long long h = th - t * p.heads;
    const unsigned short* x = reinterpret_cast<const unsigned short*>(p.x) + t * p.x_token_stride + h * p.x_head_stride;
    unsigned short* out = reinterpret_cast<unsigned short*>(p.out) + th * HEAD_DIM;
    if (item < PAIRS) {
      const int c = item * VEC;
      const Pack<VEC> a = dflash_bf16::load_readonly<VEC>(x + c), b = dflash_bf16::load_readonly<VEC>(x + HALF + c);
      const float* cos_row = reinterpret_cast<const float*>(p.cos) + t * ROTARY;
      const float* sin_row = reinterpret_cast<const float*>(p.sin) + t * ROTARY;
      float c1[VEC], s1[VEC], c2[VEC], s2[VEC];
      load_table<VEC>(cos_row + c, c1);
      load_table<VEC>(sin_row + c, s1);
      load_table<VEC>(cos_row + HALF + c, c2);
      load_table<VEC>(sin_row + HALF + c, s2);
      float ya[VEC], yb[VEC];
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const float x1 = a.elem(e), x2 = b.elem(e);
        ya[e] = __fadd_rn(__fmul_rn(x1, c1[e]), __fmul_rn(-x2, p.sign * s1[e]));
        yb[e] = __fadd_rn(__fmul_rn(x2, c2[e]), __fmul_rn(x1, p.sign * s2[e]));
      }
      dflash_bf16::store_pack<VEC>(out + c, dflash_bf16::round_to_bf16<VEC>(ya));
      dflash_bf16::store_pack<VEC>(out + HALF + c, dflash_bf16::round_to_bf16<VEC>(yb));
    } else {
      const int c = ROTARY + (item - PAIRS) * VEC;
      dflash_bf16::store_pack<VEC>(out + c, dflash_bf16::load_readonly<VEC>(x + c));
    }
  }
}

}  // namespace dflash_rope
