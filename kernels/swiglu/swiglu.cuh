// The SwiGLU product of the target's MLP, bf16 in and out: out = bf16(float(bf16(silu(gate))) * float(up)), with
// silu(x) = x / (1 + expf(-x)) in fp32 (IEEE division, the accurate expf): LibTorch's `torch::silu(gate) * up` on
// bf16 tensors bit for bit (its silu rounds to bf16, then the product rounds again), in one pass instead of two.
// Owns: the CUDA kernel of the swiglu family (NVRTC; free of host headers). A work item is VEC consecutive elements
// of one row; items walk grid-stride.
// Thread-safety: n/a (device code).
#pragma once

#include "bf16_vec.cuh"
#include "swiglu_params.h"

namespace dflash_swiglu {

using dflash_bf16::Pack;

template <int VEC, int THREADS>
__global__ void __launch_bounds__(THREADS) swiglu(const SwigluParams p) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps, at most 1024 threads");
  const long long per_row = p.cols / VEC;
  const long long total = p.rows * per_row;
  for (long long i = static_cast<long long>(blockIdx.x) * THREADS + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * THREADS) {
    const long long r = i / per_row;
    const long long c = (i - r * per_row) * VEC;
    const Pack<VEC> g = dflash_bf16::load_readonly<VEC>(reinterpret_cast<const unsigned short*>(p.gate) +
                                                        r * p.gate_stride + c);
    const Pack<VEC> u = dflash_bf16::load_readonly<VEC>(reinterpret_cast<const unsigned short*>(p.up) +
                                                        r * p.up_stride + c);
    float s[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      const float x = g.elem(e);
      s[e] = x / (1.0f + expf(-x));
    }
    const Pack<VEC> sb = dflash_bf16::round_to_bf16<VEC>(s);  // LibTorch's silu output, bf16
    float y[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) y[e] = __fmul_rn(sb.elem(e), u.elem(e));
    dflash_bf16::store_pack<VEC>(reinterpret_cast<unsigned short*>(p.out) + r * p.cols + c,
                                 dflash_bf16::round_to_bf16<VEC>(y));
  }
}

}  // namespace dflash_swiglu
