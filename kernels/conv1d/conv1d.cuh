// Causal depthwise conv1d (kernel width 4) + SiLU over packed variable-length sequences, bf16 in/out, fp32
// accumulate: the conv that precedes every gated-delta-net layer of Qwen3.5/3.6.
// Owns: the CUDA kernels of the conv1d family (compiled by NVRTC; free of host headers).
// Two kernels, templates over the tunables, one instantiated per variant:
//   conv1d_fwd_token_major: a thread owns VEC adjacent channels x TPT consecutive tokens and loads one VEC-wide
//     vector per token along the channels (for [tokens, channels] with channel stride 1, the in_proj layout);
//   conv1d_fwd_channel_major: a thread owns 1 channel x TPT consecutive tokens, loaded in VEC-wide vectors along
//     the tokens (for [channels, tokens] with token stride 1).
// Both are correct for ANY strides, pointers and sizes: vector accesses are used only where the launcher certified
// alignment (x_vec_ok / y_vec_ok) and the whole vector is in bounds; everything else takes the scalar path.
// Each thread's run of tokens needs the 3 tokens before it (the halo, loaded directly: it is in L1/L2 from the
// neighbouring thread or block) and restarts its history at every sequence start it crosses.
// Thread-safety: n/a (device code).
#pragma once

#include <cuda_bf16.h>

#include "conv1d_params.h"

namespace dflash_conv1d {

constexpr int kWidth = 4;  // kernel width: output t reads x[t-3 .. t]

// Raw storage of VEC bf16 values (bits), loadable as one aligned vector.
template <int VEC> struct Wide;
template <> struct Wide<1> { using type = unsigned short; };
template <> struct Wide<2> { using type = unsigned int; };
template <> struct Wide<4> { using type = uint2; };
template <> struct Wide<8> { using type = uint4; };

template <int VEC>
union Pack {
  typename Wide<VEC>::type wide;
  unsigned short h[VEC];
};

__device__ __forceinline__ float bf16_bits_to_float(unsigned short b) {
  return __uint_as_float(static_cast<unsigned int>(b) << 16);
}
__device__ __forceinline__ unsigned short float_to_bf16_bits(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}
// x * sigmoid(x) with the fast exp and division (a few ulp of fp32, far below bf16's half ulp): the IEEE division
// alone would make this memory-bound kernel ALU-bound on H200. For x < -88, 1 + exp(-x) = inf and the result is -0.
__device__ __forceinline__ float silu(float a) { return __fdividef(a, 1.0f + __expf(-a)); }

// Loads VEC raw elements base[0], base[stride], ...; elements at index >= n_valid read as +0. `vector` (the caller
// checked alignment, unit stride and n_valid >= VEC) selects one wide load.
template <int VEC>
__device__ __forceinline__ Pack<VEC> load_raw(const unsigned short* base, long long stride, int n_valid,
                                              bool vector) {
  Pack<VEC> p;
  if (vector) {
    p.wide = __ldg(reinterpret_cast<const typename Wide<VEC>::type*>(base));
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) p.h[j] = j < n_valid ? __ldg(base + j * stride) : static_cast<unsigned short>(0);
  }
  return p;
}

// Stores v[0 .. n_valid) to base[0], base[stride], ... (one wide store when `vector`, see load_raw).
template <int VEC>
__device__ __forceinline__ void store_elems(unsigned short* base, long long stride, const float (&v)[VEC],
                                            int n_valid, bool vector) {
  if (vector) {
    Pack<VEC> p;
    if constexpr (VEC % 2 == 0) {
#pragma unroll
      for (int j = 0; j < VEC; j += 2) {  // one cvt.rn.bf16x2.f32 per pair
        const __nv_bfloat162 two = __floats2bfloat162_rn(v[j], v[j + 1]);
        p.h[j] = __bfloat16_as_ushort(two.x);
        p.h[j + 1] = __bfloat16_as_ushort(two.y);
      }
    } else {
      p.h[0] = float_to_bf16_bits(v[0]);
    }
    *reinterpret_cast<typename Wide<VEC>::type*>(base) = p.wide;
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j)
      if (j < n_valid) base[j * stride] = float_to_bf16_bits(v[j]);
  }
}

// Walks the sequences of cu_seqlens in token order. `start`/`end`: bounds of the sequence holding the current
// token. Without cu_seqlens there is one sequence [0, tokens). Reads cu[0 .. num_seqs] only, whatever they hold.
struct SeqCursor {
  const int* cu;
  int num_seqs;
  int s;
  int start;
  int end;

  // Positions the cursor on the sequence that holds token t: the last one whose start is <= t, so that empty
  // sequences are skipped.
  __device__ __forceinline__ void seek(int t, int tokens) {
    if (cu == nullptr) {
      s = 0;
      start = 0;
      end = tokens;
      return;
    }
    int lo = 0, hi = num_seqs - 1;  // the answer lies in [lo, hi]
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (__ldg(cu + mid) <= t) lo = mid; else hi = mid - 1;
    }
    s = lo;
    start = max(__ldg(cu + s), 0);
    end = __ldg(cu + s + 1);
  }
  // Moves on to the sequence of token t (t >= the current token); true when t lies in a later sequence, i.e. t
  // is a sequence start and the history must restart from zeros.
  __device__ __forceinline__ bool advance(int t) {
    bool moved = false;
    while (t >= end && s + 1 < num_seqs) {
      ++s;
      start = end;
      end = __ldg(cu + s + 1);
      moved = true;
    }
    return moved;
  }
};

// The shared core over NC channels x TPT tokens starting at t0. x_at(i, c) gives x[t0 + i] of channel c;
// h[k][c] holds x[t0 - 3 + k] (already 0 before the sequence start); put(i, y) receives y[t0 + i][0 .. NC).
template <int NC, int TPT, class XAt, class Put>
__device__ __forceinline__ void conv_run(const XAt& x_at, const Put& put, float (&h)[3][NC],
                                         const float (&w)[NC][kWidth], const float (&b)[NC], int t0,
                                         SeqCursor& seq) {
#pragma unroll
  for (int i = 0; i < TPT; ++i) {
    if (seq.advance(t0 + i)) {
#pragma unroll
      for (int c = 0; c < NC; ++c) h[0][c] = h[1][c] = h[2][c] = 0.0f;
    }
    float out[NC];
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const float cur = x_at(i, c);
      float acc = b[c];
      acc = fmaf(w[c][0], h[0][c], acc);
      acc = fmaf(w[c][1], h[1][c], acc);
      acc = fmaf(w[c][2], h[2][c], acc);
      acc = fmaf(w[c][3], cur, acc);
      h[0][c] = h[1][c];
      h[1][c] = h[2][c];
      h[2][c] = cur;
      out[c] = silu(acc);
    }
    put(i, out);
  }
}

// Weights (and bias) of channels c0 .. c0 + NC, 0 past the last channel.
template <int NC>
__device__ __forceinline__ void load_weights(float (&w)[NC][kWidth], float (&b)[NC], const Conv1dParams& p,
                                             int c0) {
  const unsigned short* wp = reinterpret_cast<const unsigned short*>(p.weight);
  const unsigned short* bp = reinterpret_cast<const unsigned short*>(p.bias);
#pragma unroll
  for (int c = 0; c < NC; ++c) {
    const bool in = c0 + c < p.channels;
#pragma unroll
    for (int j = 0; j < kWidth; ++j)
      w[c][j] = in ? bf16_bits_to_float(__ldg(wp + static_cast<long long>(c0 + c) * kWidth + j)) : 0.0f;
    b[c] = (in && bp != nullptr) ? bf16_bits_to_float(__ldg(bp + c0 + c)) : 0.0f;
  }
}

// Token-major tiling: a block covers BLOCK_C channels x (THREADS / (BLOCK_C / VEC)) * TPT tokens; a thread owns
// VEC adjacent channels x TPT consecutive tokens, one VEC-wide load per token.
template <int BLOCK_C, int VEC, int TPT, int THREADS>
__global__ void __launch_bounds__(THREADS) conv1d_fwd_token_major(const Conv1dParams p) {
  static_assert(VEC == 1 || VEC == 2 || VEC == 4 || VEC == 8, "vector width is 1, 2, 4 or 8 bf16");
  static_assert(BLOCK_C % VEC == 0, "a block's channels split into whole vectors");
  constexpr int LANES_C = BLOCK_C / VEC;
  static_assert(LANES_C <= THREADS && THREADS % LANES_C == 0, "threads must tile the channel lanes exactly");
  static_assert(TPT >= 1 && TPT <= 64, "tokens per thread in [1, 64]");
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps, at most 1024 threads");
  constexpr int ROWS = THREADS / LANES_C;
  constexpr int BLOCK_T = ROWS * TPT;

  const int lane_c = static_cast<int>(threadIdx.x) % LANES_C;
  const int row = static_cast<int>(threadIdx.x) / LANES_C;
  const int c0 = static_cast<int>(blockIdx.y) * BLOCK_C + lane_c * VEC;
  const long long t0l = static_cast<long long>(blockIdx.x) * BLOCK_T + static_cast<long long>(row) * TPT;
  if (c0 >= p.channels || t0l >= p.tokens) return;
  const int t0 = static_cast<int>(t0l);
  const int nc = min(VEC, p.channels - c0);

  const unsigned short* x = reinterpret_cast<const unsigned short*>(p.x) + c0 * p.x_stride_c;
  unsigned short* y = reinterpret_cast<unsigned short*>(p.y) + c0 * p.y_stride_c;
  const bool xv = p.x_vec_ok != 0 && nc == VEC;
  const bool yv = p.y_vec_ok != 0 && nc == VEC;

  // Every load of the run first: independent, so they are all in flight together.
  Pack<VEC> raw[TPT];
#pragma unroll
  for (int i = 0; i < TPT; ++i) {
    const int t = t0 + i;
    raw[i] = load_raw<VEC>(x + static_cast<long long>(t) * p.x_stride_t, p.x_stride_c,
                           t < p.tokens ? nc : 0, xv && t < p.tokens);
  }
  float w[VEC][kWidth], b[VEC];
  load_weights<VEC>(w, b, p, c0);

  SeqCursor seq{reinterpret_cast<const int*>(p.cu_seqlens), p.num_seqs, 0, 0, 0};
  seq.seek(t0, p.tokens);
  float h[3][VEC];
#pragma unroll
  for (int k = 0; k < 3; ++k) {
    const int t = t0 - 3 + k;
    const bool in = t >= seq.start;
    const Pack<VEC> hp = load_raw<VEC>(x + static_cast<long long>(t) * p.x_stride_t, p.x_stride_c, in ? nc : 0,
                                       xv && in);
#pragma unroll
    for (int c = 0; c < VEC; ++c) h[k][c] = bf16_bits_to_float(hp.h[c]);
  }

  conv_run<VEC, TPT>([&](int i, int c) { return bf16_bits_to_float(raw[i].h[c]); },
                     [&](int i, const float (&out)[VEC]) {
                       const int t = t0 + i;
                       if (t < p.tokens) store_elems<VEC>(y + static_cast<long long>(t) * p.y_stride_t,
                                                          p.y_stride_c, out, nc, yv);
                     },
                     h, w, b, t0, seq);
}

// Channel-major tiling: a block covers BLOCK_C channels x (THREADS / BLOCK_C) * TPT tokens; a thread owns one
// channel x TPT consecutive tokens, loaded as TPT / VEC vectors along the tokens.
template <int BLOCK_C, int VEC, int TPT, int THREADS>
__global__ void __launch_bounds__(THREADS) conv1d_fwd_channel_major(const Conv1dParams p) {
  static_assert(VEC == 1 || VEC == 2 || VEC == 4 || VEC == 8, "vector width is 1, 2, 4 or 8 bf16");
  static_assert(TPT % VEC == 0, "a thread's tokens split into whole vectors");
  static_assert(TPT >= 1 && TPT <= 64, "tokens per thread in [1, 64]");
  static_assert(BLOCK_C >= 1 && BLOCK_C <= THREADS && THREADS % BLOCK_C == 0,
                "threads must split evenly over the block's channels");
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps, at most 1024 threads");
  constexpr int LANES_T = THREADS / BLOCK_C;
  constexpr int BLOCK_T = LANES_T * TPT;
  constexpr int NV = TPT / VEC;

  const int lane_t = static_cast<int>(threadIdx.x) % LANES_T;
  const int cl = static_cast<int>(threadIdx.x) / LANES_T;
  const int c = static_cast<int>(blockIdx.y) * BLOCK_C + cl;
  const long long t0l = static_cast<long long>(blockIdx.x) * BLOCK_T + static_cast<long long>(lane_t) * TPT;
  if (c >= p.channels || t0l >= p.tokens) return;
  const int t0 = static_cast<int>(t0l);

  const unsigned short* xc = reinterpret_cast<const unsigned short*>(p.x) + c * p.x_stride_c;
  unsigned short* yc = reinterpret_cast<unsigned short*>(p.y) + c * p.y_stride_c;

  Pack<VEC> raw[NV];
#pragma unroll
  for (int n = 0; n < NV; ++n) {
    const int ts = t0 + n * VEC;
    const int nvalid = max(0, min(VEC, p.tokens - ts));
    raw[n] = load_raw<VEC>(xc + static_cast<long long>(ts) * p.x_stride_t, p.x_stride_t, nvalid,
                           p.x_vec_ok != 0 && nvalid == VEC);
  }
  float w[1][kWidth], b[1];
  load_weights<1>(w, b, p, c);

  SeqCursor seq{reinterpret_cast<const int*>(p.cu_seqlens), p.num_seqs, 0, 0, 0};
  seq.seek(t0, p.tokens);
  float h[3][1];
#pragma unroll
  for (int k = 0; k < 3; ++k) {
    const int t = t0 - 3 + k;
    h[k][0] = t >= seq.start ? bf16_bits_to_float(__ldg(xc + static_cast<long long>(t) * p.x_stride_t)) : 0.0f;
  }

  float outv[VEC];
  conv_run<1, TPT>([&](int i, int) { return bf16_bits_to_float(raw[i / VEC].h[i % VEC]); },
                   [&](int i, const float (&out)[1]) {
                     outv[i % VEC] = out[0];
                     if (i % VEC == VEC - 1) {
                       const int ts = t0 + (i / VEC) * VEC;
                       const int nvalid = max(0, min(VEC, p.tokens - ts));
                       if (nvalid > 0)
                         store_elems<VEC>(yc + static_cast<long long>(ts) * p.y_stride_t, p.y_stride_t, outv,
                                          nvalid, p.y_vec_ok != 0 && nvalid == VEC);
                     }
                   },
                   h, w, b, t0, seq);
}

}  // namespace dflash_conv1d
