// Row-wise cross-entropy over fp32 logits in one kernel: per row the log-sum-exp, the loss w * (lse - x[label]), the
// argmax and (kernels built with GRAD) the logits gradient grad_scale * w * (softmax - onehot) in bf16, so that a
// trainer gets the loss and its gradient from one read of the logits, with no recompute in the backward.
// Owns: the CUDA kernels of the xent family (compiled by NVRTC; free of host headers). Two kernels, templates over
// the tunables, one instantiated per variant:
//   xent_rows:       one block per row (grid = rows);
//   xent_rows_split: SPLIT blocks per row as one thread block cluster (grid = rows * SPLIT), each block a contiguous
//                    slice of the row; the blocks exchange their (max, index, sum) through distributed shared memory
//                    so every block of the row knows its log-sum-exp before writing the gradient.
// Within a block a thread owns UNROLL vectors of VEC floats per tile (tile = THREADS * UNROLL vectors). The first pass
// walks the block's tiles from the last to the first (a running max, its first index and an online sum of exp), so
// it ends holding tile 0 in registers; the gradient pass starts from those registers and re-reads tiles 1, 2, ...,
// the most recently read first (from L2 while they are still there). A slice of one tile is read exactly once.
// Semantics (the float64 reference of reference.h defines them on the host):
//   lse = log(sum exp(x)): NaN if the row holds a NaN, else +inf if it holds +inf, else -inf if every x is -inf;
//   argmax = the first index of the maximum, NaN counting as larger than everything (LibTorch's argmax);
//   a row is valid when 0 <= label < vocab and w != 0 (label -100 and any other value outside [0, vocab) ignore it);
//   loss = w * (lse - x[label]) on valid rows, exactly 0 on the others (whatever the row holds);
//   grad = bf16(grad_scale * w * (exp(x - lse) - [v == label])) on valid rows (NaN everywhere on a valid row whose
//          lse is not finite, as LibTorch's softmax), exactly +0 on the others.
// Numerics: exp as ex2.approx.ftz of x * log2(e) - max * log2(e) (one fma), relative error ~2^-22, results below
// 2^-126 flushed to 0; fp32 accumulation per thread, then a fixed-order tree across threads, warps and blocks (every
// block of a cluster combines the partials in rank order, so all of them use the same max and sum bit for bit).
// Thread-safety: n/a (device code).
#pragma once

#include <cuda_bf16.h>

#include "cluster.cuh"
#include "ptx.cuh"
#include "xent_params.h"

namespace dflash_xent {

constexpr float kLog2e = 1.44269504088896340736f;
constexpr float kLn2 = 0.693147180559945309417f;
constexpr int kNoIndex = 0x7fffffff;  // the index of an empty part (loses every tie)

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }
__device__ __forceinline__ float pos_inf() { return __int_as_float(0x7f800000); }

// max * log2(e), the offset of the exponents; 0 for a part that has seen only -inf (its sum is 0 and stays 0).
__device__ __forceinline__ float scaled_max(float m) { return m == neg_inf() ? 0.0f : m * kLog2e; }

// The running state of a part of a row: its maximum (NaN once it has seen a NaN), the first index of it (of the
// first NaN), and sum over the part of 2^(x * log2(e) - scaled_max(best)).
struct Partial {
  float best;
  int index;
  float sum;
};

__device__ __forceinline__ Partial empty_partial() { return {neg_inf(), kNoIndex, 0.0f}; }

// True when (bv, bi) is the argmax over (av, ai): NaN first (the smaller index of two), then the larger value, then
// the smaller index. Symmetric: both orders of the operands pick the same one.
__device__ __forceinline__ bool takes_over(float av, int ai, float bv, int bi) {
  const bool a_nan = av != av, b_nan = bv != bv;
  if (a_nan || b_nan) return b_nan && (!a_nan || bi < ai);
  return bv > av || (bv == av && bi < ai);
}

// The state of the union of two parts. The sums are rescaled to the new maximum by factors <= 1 (fminf keeps a part
// that saw only -inf at 0 instead of 0 * inf); commutative, so both lanes of a butterfly get identical bits.
__device__ __forceinline__ Partial combine(const Partial& a, const Partial& b) {
  Partial r = takes_over(a.best, a.index, b.best, b.index) ? b : a;
  const float ms = scaled_max(r.best);
  r.sum = a.sum * dflash_ptx::ex2_approx_ftz(fminf(scaled_max(a.best) - ms, 0.0f)) +
          b.sum * dflash_ptx::ex2_approx_ftz(fminf(scaled_max(b.best) - ms, 0.0f));
  return r;
}

__device__ __forceinline__ Partial warp_reduce(Partial p) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    Partial o;
    o.best = __shfl_xor_sync(0xffffffffu, p.best, offset);
    o.index = __shfl_xor_sync(0xffffffffu, p.index, offset);
    o.sum = __shfl_xor_sync(0xffffffffu, p.sum, offset);
    p = combine(p, o);
  }
  return p;
}

// VEC floats at p[0 .. VEC) as one vector load (16-byte aligned for float4). LAST_USE: the load is the last read of
// these bytes (evict-first in L2), else they stay cached for a second read.
template <int VEC, bool LAST_USE>
__device__ __forceinline__ void load_full(float (&x)[VEC], const float* p) {
  if constexpr (VEC == 4) {
    const float4* q = reinterpret_cast<const float4*>(p);
    const float4 v = LAST_USE ? __ldcs(q) : __ldg(q);
    x[0] = v.x;
    x[1] = v.y;
    x[2] = v.z;
    x[3] = v.w;
  } else if constexpr (VEC == 2) {
    const float2* q = reinterpret_cast<const float2*>(p);
    const float2 v = LAST_USE ? __ldcs(q) : __ldg(q);
    x[0] = v.x;
    x[1] = v.y;
  } else {
    x[0] = LAST_USE ? __ldcs(p) : __ldg(p);
  }
}

// A thread's UNROLL vectors of one tile: vector u is vector v0 + u * THREADS of the row, row[(v0 + u * THREADS) *
// VEC ..]. Positions outside the block's slice (vectors >= end) or past the row's end read as -inf: they add 0 to
// the sum and lose every argmax tie to a real element of lower index. Every tile but a slice's last one takes the
// first branch (whole vectors at constant offsets from one address).
template <int THREADS, int VEC, int UNROLL, bool LAST_USE>
__device__ __forceinline__ void load_tile(float (&x)[UNROLL][VEC], const float* row, int v0, int end, int vocab) {
  const int last = v0 + (UNROLL - 1) * THREADS;
  if (last < end && (last + 1) * VEC <= vocab) {
    const float* base = row + v0 * VEC;
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) load_full<VEC, LAST_USE>(x[u], base + u * THREADS * VEC);
    return;
  }
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const int vi = v0 + u * THREADS, e = vi * VEC;
    if (vi < end && e + VEC <= vocab) {
      load_full<VEC, LAST_USE>(x[u], row + e);
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j)
        x[u][j] = (vi < end && e + j < vocab) ? (LAST_USE ? __ldcs(row + e + j) : __ldg(row + e + j)) : neg_inf();
    }
  }
}

__device__ __forceinline__ unsigned short bf16_bits(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
__device__ __forceinline__ unsigned bf16x2_bits(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return static_cast<unsigned>(__bfloat16_as_ushort(v.x)) | (static_cast<unsigned>(__bfloat16_as_ushort(v.y)) << 16);
}

// g[0 .. VEC) as bf16 to p[0 .. VEC) in one vector store (2 * VEC-byte aligned); streaming: this kernel does not
// read the gradient again.
template <int VEC>
__device__ __forceinline__ void store_full(unsigned short* p, const float (&g)[VEC]) {
  if constexpr (VEC == 4) {
    __stcs(reinterpret_cast<uint2*>(p), make_uint2(bf16x2_bits(g[0], g[1]), bf16x2_bits(g[2], g[3])));
  } else if constexpr (VEC == 2) {
    __stcs(reinterpret_cast<unsigned*>(p), bf16x2_bits(g[0], g[1]));
  } else {
    __stcs(p, bf16_bits(g[0]));
  }
}

// The gradient of a thread's UNROLL vectors of one tile (the layout of load_tile); nothing outside the slice or past
// the row's end is written.
template <int THREADS, int VEC, int UNROLL>
__device__ __forceinline__ void store_tile(unsigned short* row, int v0, int end, int vocab,
                                           const float (&g)[UNROLL][VEC]) {
  const int last = v0 + (UNROLL - 1) * THREADS;
  if (last < end && (last + 1) * VEC <= vocab) {
    unsigned short* base = row + v0 * VEC;
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) store_full<VEC>(base + u * THREADS * VEC, g[u]);
    return;
  }
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const int vi = v0 + u * THREADS, e = vi * VEC;
    if (vi >= end) continue;
    if (e + VEC <= vocab) {
      store_full<VEC>(row + e, g[u]);
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j)
        if (e + j < vocab) __stcs(row + e + j, bf16_bits(g[u][j]));
    }
  }
}

// The block's partial over threads: warp butterflies, then warp 0 over the warps' results (in warp order). The
// result is in every lane of warp 0.
template <int THREADS>
__device__ __forceinline__ Partial block_reduce(Partial p) {
  constexpr int kWarps = THREADS / 32;
  __shared__ float s_best[kWarps];
  __shared__ int s_index[kWarps];
  __shared__ float s_sum[kWarps];
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  p = warp_reduce(p);
  if (kWarps == 1) return p;
  if (lane == 0) {
    s_best[warp] = p.best;
    s_index[warp] = p.index;
    s_sum[warp] = p.sum;
  }
  __syncthreads();
  if (warp == 0) {
    p = lane < kWarps ? Partial{s_best[lane], s_index[lane], s_sum[lane]} : empty_partial();
    p = warp_reduce(p);
  }
  return p;
}

// The whole per-row computation for one block: block `rank` of the SPLIT blocks of row `row`.
template <int THREADS, int VEC, int UNROLL, int SPLIT, bool GRAD>
__device__ __forceinline__ void xent_row_block(const XentParams& p, int row, int rank) {
  static_assert(THREADS % 32 == 0 && THREADS >= 32 && THREADS <= 1024, "whole warps, at most 1024 threads");
  static_assert(VEC == 1 || VEC == 2 || VEC == 4, "vector width is 1, 2 or 4 floats");
  static_assert(UNROLL >= 1 && UNROLL <= 16, "vectors per thread per tile in [1, 16]");
  static_assert(SPLIT == 1 || SPLIT == 2 || SPLIT == 4 || SPLIT == 8, "blocks per row: 1, 2, 4 or 8 (a cluster)");
  constexpr int kTile = THREADS * UNROLL;  // vectors per tile
  const int tid = static_cast<int>(threadIdx.x);
  const int vocab = p.vocab;

  // The row's label and weight, needed only after the first pass: loaded first so their latency hides behind it.
  const long long label64 = __ldg(reinterpret_cast<const long long*>(p.labels) + row);
  const float w = __ldg(reinterpret_cast<const float*>(p.weights) + row);
  const bool valid = label64 >= 0 && label64 < vocab && w != 0.0f;
  const int label = valid ? static_cast<int>(label64) : -1;
  const float* xrow = reinterpret_cast<const float*>(p.logits) + static_cast<long long>(row) * p.row_stride;
  const bool owner = rank == 0 && tid == 0;  // writes the row's loss and argmax
  const float x_label = (owner && valid) ? __ldg(xrow + label) : 0.0f;

  // This block's slice of the row, in whole vectors (only the row's last vector can be partial).
  const int nvec = (vocab + VEC - 1) / VEC;
  const int per_block = (nvec + SPLIT - 1) / SPLIT;
  const int begin = rank * per_block;
  const int end = min(begin + per_block, nvec);
  const int tiles = end > begin ? (end - begin + kTile - 1) / kTile : 0;

  // Pass 1, tiles last to first and each thread's elements in decreasing index order, so that ">=" keeps the first
  // index of the maximum (and the first NaN). x ends holding tile 0.
  Partial st = empty_partial();
  float x[UNROLL][VEC];
  for (int t = tiles - 1; t >= 0; --t) {
    const int v0 = begin + t * kTile + tid;
    load_tile<THREADS, VEC, UNROLL, false>(x, xrow, v0, end, vocab);
    const float ms_old = scaled_max(st.best);
#pragma unroll
    for (int u = UNROLL - 1; u >= 0; --u) {
#pragma unroll
      for (int j = VEC - 1; j >= 0; --j) {
        const float v = x[u][j];
        const bool take = v >= st.best || v != v;
        st.best = take ? v : st.best;
        st.index = take ? (v0 + u * THREADS) * VEC + j : st.index;
      }
    }
    const float ms = scaled_max(st.best);
    float acc = 0.0f;
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
#pragma unroll
      for (int j = 0; j < VEC; ++j) acc += dflash_ptx::ex2_approx_ftz(fmaf(x[u][j], kLog2e, -ms));
    st.sum = st.sum * dflash_ptx::ex2_approx_ftz(fminf(ms_old - ms, 0.0f)) + acc;
  }

  st = block_reduce<THREADS>(st);  // valid in warp 0

  __shared__ float s_ms, s_inv_sum;  // the row's scaled max and 1 / sum, for the gradient pass
  if constexpr (SPLIT > 1) {
    // Publish the block's partial, then every block combines all SPLIT partials in rank order.
    __shared__ float s_part_best;
    __shared__ int s_part_index;
    __shared__ float s_part_sum;
    if (tid == 0) {
      s_part_best = st.best;
      s_part_index = st.index;
      s_part_sum = st.sum;
    }
    dflash_ptx::barrier_cluster_arrive_release();
    dflash_ptx::barrier_cluster_wait();
    if (tid < 32) {
      Partial mine = empty_partial();
      if (tid < SPLIT) {
        const unsigned r = static_cast<unsigned>(tid);
        mine.best =
            dflash_ptx::ld_shared_cluster_f32(dflash_ptx::mapa_shared_cluster(dflash_ptx::smem_addr(&s_part_best), r));
        mine.index =
            dflash_ptx::ld_shared_cluster_s32(dflash_ptx::mapa_shared_cluster(dflash_ptx::smem_addr(&s_part_index), r));
        mine.sum =
            dflash_ptx::ld_shared_cluster_f32(dflash_ptx::mapa_shared_cluster(dflash_ptx::smem_addr(&s_part_sum), r));
      }
      Partial all = empty_partial();
#pragma unroll
      for (int r = 0; r < SPLIT; ++r) {
        Partial o;
        o.best = __shfl_sync(0xffffffffu, mine.best, r);
        o.index = __shfl_sync(0xffffffffu, mine.index, r);
        o.sum = __shfl_sync(0xffffffffu, mine.sum, r);
        all = r == 0 ? o : combine(all, o);
      }
      st = all;
    }
    // Done reading the other blocks' shared memory; the matching wait is at the end (no block exits before all have
    // read its partial).
    dflash_ptx::barrier_cluster_arrive_relaxed();
  }

  if (tid == 0) {
    const bool special = st.best != st.best || st.best == pos_inf() || st.best == neg_inf();  // NaN, +inf, -inf
    const float ms = scaled_max(st.best);
    s_ms = ms;
    // softmax = 2^(x log2e - ms) / sum. A row whose lse is not finite gets NaN (LibTorch's softmax does too).
    s_inv_sum = special ? __int_as_float(0x7fffffff) : 1.0f / st.sum;
    if (owner) {
      // lse = best + (log2(sum) - (best * log2(e) - ms)) * ln2: the maximum exactly, the rounding of ms and the
      // rounding of the constants only on the small part (log2(sum) <= log2(vocab)). NaN, +inf and -inf rows have
      // lse = best (LibTorch's logsumexp).
      const float lse = special ? st.best : st.best + (log2f(st.sum) - fmaf(st.best, kLog2e, -ms)) * kLn2;
      reinterpret_cast<float*>(p.loss)[row] = valid ? w * (lse - x_label) : 0.0f;
      reinterpret_cast<long long*>(p.argmax)[row] = static_cast<long long>(st.index);
    }
  }

  if constexpr (GRAD) {
    __syncthreads();
    // grad = coef * (t / sum - [v == label]) = fma(t, coef / sum, -coef or 0) with t = 2^(x log2e - ms): the exponent
    // is relative to the max, so the label's p - 1 keeps the accuracy of t / sum whatever the size of the logits.
    const float neg_ms = -s_ms;
    const float coef = p.grad_scale * w;
    const float scale = coef * s_inv_sum;
    const float neg_coef = -coef;
    unsigned short* grow = reinterpret_cast<unsigned short*>(p.grad) + static_cast<long long>(row) * p.grad_row_stride;
    for (int t = 0; t < tiles; ++t) {
      const int v0 = begin + t * kTile + tid;
      if (valid && t > 0) load_tile<THREADS, VEC, UNROLL, true>(x, xrow, v0, end, vocab);  // tile 0 is still in x
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int off = label - (v0 + u * THREADS) * VEC;  // the label's position in this vector, if it is there
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const float e = dflash_ptx::ex2_approx_ftz(fmaf(x[u][j], kLog2e, neg_ms));
          x[u][j] = valid ? fmaf(e, scale, j == off ? neg_coef : 0.0f) : 0.0f;  // x now holds the gradient
        }
      }
      store_tile<THREADS, VEC, UNROLL>(grow, v0, end, vocab, x);
    }
  }

  if constexpr (SPLIT > 1) dflash_ptx::barrier_cluster_wait();
}

template <int THREADS, int VEC, int UNROLL, bool GRAD>
__global__ void __launch_bounds__(THREADS) xent_rows(const XentParams p) {
  xent_row_block<THREADS, VEC, UNROLL, 1, GRAD>(p, static_cast<int>(blockIdx.x), 0);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
// Before sm_90 there are no clusters: the split variants fail to compile with this reason, the others still build.
template <int THREADS, int VEC, int UNROLL, int SPLIT, bool GRAD>
__global__ void xent_rows_split(const XentParams) {
  static_assert(SPLIT < 0, "split > 1 needs thread block clusters (sm_90 or later)");
}
#else
template <int THREADS, int VEC, int UNROLL, int SPLIT, bool GRAD>
__global__ void __cluster_dims__(SPLIT, 1, 1) __launch_bounds__(THREADS) xent_rows_split(const XentParams p) {
  xent_row_block<THREADS, VEC, UNROLL, SPLIT, GRAD>(p, static_cast<int>(blockIdx.x) / SPLIT,
                                                    static_cast<int>(dflash_ptx::cluster_ctarank()));
}
#endif

}  // namespace dflash_xent
