// Device building blocks shared by the gated-delta-net kernels, on top of the shared PTX wrappers (ptx.cuh): the
// gate math (g, beta), L2-normalised rows (or the rows' inverse norms) of shared-memory tiles, the padded-tile copies
// into shared memory and whole-row stores out of it, and warp-level shared-memory GEMMs on mma.sync m16n8k16 (bf16
// in, fp32 out) fed by ldmatrix. Free of host headers:
// NVRTC compiles it (cuda_bf16.h only). Portable sm_80 / sm_90 / sm_120.
// Who may call: the gdn kernels of this folder. Thread-safety: device code; every helper documents which
// threads of the block must call it together (the block-wide ones end with __syncthreads where stated).
#pragma once

#include <cuda_bf16.h>

#include "gdn_layout.h"
#include "ptx.cuh"

namespace gdn {

using namespace dflash_ptx;  // the PTX wrappers, unqualified in the kernels

using bf16 = __nv_bfloat16;

constexpr float kL2Eps = 1e-6f;  // q, k normalisation: x * rsqrt(sum x^2 + eps)

// softplus with torch's threshold (x > 20 -> x); g = -exp(A_log) * softplus(a + dt_bias).
__device__ __forceinline__ float gate_g(float a, float a_log, float dt_bias) {
  const float x = a + dt_bias;
  const float sp = x > 20.f ? x : log1pf(__expf(x));
  return -__expf(a_log) * sp;
}
__device__ __forceinline__ float gate_beta(float b) { return 1.f / (1.f + __expf(-b)); }

// The gate (g, beta) of element i = token * st + hv of the [T, HV] gate inputs: precomputed (g_in, beta_in fp32,
// non-null: flash-linear-attention's form) or from the raw inputs (a, b bf16; alog, dtb = A_log[hv], dt_bias[hv]).
__device__ __forceinline__ float2 gate_at(const bf16* __restrict__ a, const bf16* __restrict__ b,
                                          const float* __restrict__ g_in, const float* __restrict__ beta_in,
                                          long long i, float alog, float dtb) {
  if (g_in != nullptr) return make_float2(g_in[i], beta_in[i]);
  return make_float2(gate_g(__bfloat162float(a[i]), alog, dtb), gate_beta(__bfloat162float(b[i])));
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// L2-normalises (eps kL2Eps) each of the ROWS rows of a [ROWS][ld] bf16 shared-memory tile of 128 columns in
// place and multiplies it by `mult`; zero rows stay zero. One warp per row; no barrier inside (callers put one
// between the tile's load and this, and after it).
template <int ROWS, int NWARPS>
__device__ __forceinline__ void l2norm_rows_inplace(bf16* tile, int ld, float mult) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < ROWS; r += NWARPS) {
    uint2* p = reinterpret_cast<uint2*>(tile + r * ld + lane * 4);
    uint2 raw = *p;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
    const float x0 = __low2float(h[0]), x1 = __high2float(h[0]), x2 = __low2float(h[1]), x3 = __high2float(h[1]);
    const float s = rsqrtf(warp_sum(x0 * x0 + x1 * x1 + x2 * x2 + x3 * x3) + kL2Eps) * mult;
    h[0] = __floats2bfloat162_rn(x0 * s, x1 * s);
    h[1] = __floats2bfloat162_rn(x2 * s, x3 * s);
    *p = raw;
  }
}

// acc + the squares of the two bf16 of x (a bf16's float is its 16 bits shifted up).
__device__ __forceinline__ float add_squares_bf16x2(unsigned x, float acc) {
  const float lo = __uint_as_float(x << 16), hi = __uint_as_float(x & 0xffff0000u);
  return fmaf(lo, lo, fmaf(hi, hi, acc));
}

// inv[r] = rsqrt(sum of squares of row r + kL2Eps) for the ROWS rows of a [ROWS][ld] bf16 shared-memory tile of 128
// columns (16-byte aligned rows), the tile left as it is: the factor l2norm_rows_inplace multiplies by, for callers
// that fold it into later products instead of rounding normalised rows to bf16. NTHREADS / ROWS adjacent threads
// per row, each summing every (NTHREADS / ROWS)-th 16-byte vector, combined by shuffles (a warp per row with a
// 5-step shuffle chain per row was a third of gdn_chunk_prep's stall samples). Called by all NTHREADS threads
// (whole warps); no barrier inside.
template <int ROWS, int NTHREADS>
__device__ __forceinline__ void row_inv_norms(const bf16* tile, int ld, float* inv) {
  constexpr int kPerRow = NTHREADS / ROWS, kVecs = kDim / 8 / kPerRow;
  static_assert(NTHREADS % ROWS == 0 && kPerRow <= 16 && (kPerRow & (kPerRow - 1)) == 0,
                "a power-of-two number of threads per row, at most one vector each");
  const int t = threadIdx.x, r = t / kPerRow, part = t % kPerRow;
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    const uint4 raw = *reinterpret_cast<const uint4*>(tile + r * ld + (part + j * kPerRow) * 8);
    ss = add_squares_bf16x2(raw.x, add_squares_bf16x2(raw.y, add_squares_bf16x2(raw.z, add_squares_bf16x2(raw.w, ss))));
  }
#pragma unroll
  for (int o = kPerRow / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (part == 0) inv[r] = rsqrtf(ss + kL2Eps);
}

// Copies a ROWS x COLS bf16 tile (row r at src + r * row_stride, 16-byte aligned rows) into shared memory
// with 16-byte cp.async; rows in [valid, ROWS) are zero-filled (cp.async with source size 0, so they land with
// the group too). Call cp_async_wait_group (or cp_async_wait_all) + a barrier before use. The loop has a compile-time
// trip count and no branches: thread t copies vectors t, t + NTHREADS, ... (a runtime-bound loop with a branch per
// vector costs ~290 instructions per warp per chunk in gdn_chunk_fused, half its issue).
template <int ROWS, int COLS, int NTHREADS>
__device__ __forceinline__ void load_tile_async(const bf16* __restrict__ src, long long row_stride, int valid,
                                                bf16* dst, int ld) {
  constexpr int kVecPerRow = COLS / 8, kVecs = ROWS * kVecPerRow;
  constexpr int kIters = (kVecs + NTHREADS - 1) / NTHREADS;
  static_assert(COLS % 8 == 0, "tile rows must be whole 16-byte vectors");
#pragma unroll
  for (int e = 0; e < kIters; ++e) {
    const int i = static_cast<int>(threadIdx.x) + e * NTHREADS;
    if (kVecs % NTHREADS == 0 || i < kVecs) {
      const int r = i / kVecPerRow, c = (i % kVecPerRow) * 8;
      const unsigned saddr = smem_addr(dst + r * ld + c);
      const bool in = r < valid;
      // The row's address only for rows that are read (computing it for every row costs registers: sm_120's
      // gdn_chunk_prep<64, 4, true> then spills).
      cp_async_cg_16_zfill(saddr, in ? src + r * row_stride + c : src, in ? 16 : 0);
    }
  }
}
// The byte offset of this thread's first 16-byte vector in a tile of COLS columns (load_tile_async_at).
template <int COLS, int NTHREADS>
__device__ __forceinline__ unsigned tile_thread_offset(long long row_stride) {
  constexpr unsigned kVecPerRow = COLS / 8;
  static_assert(NTHREADS % kVecPerRow == 0, "a thread's vectors share one column");
  // 32 bits suffice where it is used: row < 128 (tile rows or threads / 2) and row_stride * 2 bytes <= the fused
  // pass's HV * 256 with HV <= 65535 (a grid dimension): < 2^31.
  const unsigned t = threadIdx.x;
  return (t / kVecPerRow) * static_cast<unsigned>(row_stride) * 2u + (t % kVecPerRow) * 16u;
}
// load_tile_async with the thread's address part computed once, outside a loop (with load_tile_async the fused pass
// recomputes every vector's 64-bit row product, the validity select and the pointer each chunk: ~12 integer
// instructions per 16-byte copy in SASS). `src` is row 0 of the tile (block-uniform), `thread_off` is
// tile_thread_offset<COLS, NTHREADS>(row_stride): the byte offset of the thread's first vector, row
// t / (COLS / 8), column (t % (COLS / 8)) * 8; vector e of the thread is kRowStep * e rows further, same column.
// ALL_ROWS: every row is valid (valid == ROWS), no check, no zero fill; else rows in [valid, ROWS) are zero-filled
// exactly as in load_tile_async (source size 0, address src). The same copies, sources and destinations as
// load_tile_async<ROWS, COLS, NTHREADS>(src, row_stride, valid, dst, ld).
template <int ROWS, int COLS, int NTHREADS, bool ALL_ROWS>
__device__ __forceinline__ void load_tile_async_at(const bf16* __restrict__ src, long long row_stride,
                                                   unsigned thread_off, int valid, bf16* dst, int ld) {
  constexpr int kVecPerRow = COLS / 8, kVecs = ROWS * kVecPerRow, kRowStep = NTHREADS / kVecPerRow;
  constexpr int kIters = (kVecs + NTHREADS - 1) / NTHREADS;
  static_assert(COLS % 8 == 0 && NTHREADS % kVecPerRow == 0, "whole 16-byte vectors, one column per thread");
  const int r0 = static_cast<int>(threadIdx.x) / kVecPerRow, c0 = (static_cast<int>(threadIdx.x) % kVecPerRow) * 8;
#pragma unroll
  for (int e = 0; e < kIters; ++e) {
    const int i = static_cast<int>(threadIdx.x) + e * NTHREADS;
    if (kVecs % NTHREADS == 0 || i < kVecs) {
      const int r = r0 + e * kRowStep;
      const unsigned saddr = smem_addr(dst + r * ld + c0);
      const char* row = reinterpret_cast<const char*>(src) + e * kRowStep * row_stride * 2;  // block-uniform
      const bf16* g = reinterpret_cast<const bf16*>(row + thread_off);
      if constexpr (ALL_ROWS) {
        cp_async_cg_16(saddr, g);
      } else {
        const bool in = r < valid;
        cp_async_cg_16_zfill(saddr, in ? g : src, in ? 16 : 0);
      }
    }
  }
}
// Fragments of one warp's 16 x 16 mma tile at depth k0 (ldmatrix.x4): A's 16 x 16 block at rows m0 (A [M][KD]
// row-major, lda; A_KM: [KD][M]) and B's 16 x 16 block at columns n0 (B [N][KD] row-major, ldb; B_KN: [KD][N]).
// Loading a fragment once and feeding several mma_16x16 with it saves shared-memory bandwidth.
template <bool A_KM>
__device__ __forceinline__ void load_a_frag(unsigned (&a)[4], const bf16* A, int lda, int m0, int k0) {
  const int lane = threadIdx.x % 32, mi = lane / 8, li = lane % 8;
  if constexpr (!A_KM) {
    ldmatrix_x4(a, smem_addr(A + (m0 + (mi % 2) * 8 + li) * lda + k0 + (mi / 2) * 8));
  } else {
    ldmatrix_x4_trans(a, smem_addr(A + (k0 + (mi / 2) * 8 + li) * lda + m0 + (mi % 2) * 8));
  }
}
template <bool B_KN>
__device__ __forceinline__ void load_b_frag(unsigned (&b)[4], const bf16* B, int ldb, int n0, int k0) {
  const int lane = threadIdx.x % 32, mi = lane / 8, li = lane % 8;
  if constexpr (!B_KN) {
    ldmatrix_x4(b, smem_addr(B + (n0 + (mi / 2) * 8 + li) * ldb + k0 + (mi % 2) * 8));
  } else {
    ldmatrix_x4_trans(b, smem_addr(B + (k0 + (mi % 2) * 8 + li) * ldb + n0 + (mi / 2) * 8));
  }
}
// acc (layout of warp_tile_mma) += the 16 x 16 x 16 product of fragments a and b.
__device__ __forceinline__ void mma_16x16(float (&acc)[8], const unsigned (&a)[4], const unsigned (&b)[4]) {
  mma_m16n8k16_bf16(acc[0], acc[1], acc[2], acc[3], a, b[0], b[1]);
  mma_m16n8k16_bf16(acc[4], acc[5], acc[6], acc[7], a, b[2], b[3]);
}

// One warp's 16 x 16 tile of C[M x N] += A[M x KD] * B[KD x N] at (m0, n0), operands in shared memory (bf16),
// accumulators in registers: acc[0..3] is the m16n8 fragment of columns n0..n0+7, acc[4..7] of n0+8..n0+15;
// lane l holds (m0 + l/4, n0 + 2(l%4) + {0,1}) in acc[0..1] / acc[4..5] and row + 8 in acc[2..3] / acc[6..7]
// (tile_row / tile_col below). Storage: A is [M][KD] row-major (lda) unless A_KM, then [KD][M];
// B is [N][KD] row-major (ldb) unless B_KN, then [KD][N]. The whole warp calls it; no barrier inside.
template <int KD, bool A_KM, bool B_KN>
__device__ __forceinline__ void warp_tile_mma(float (&acc)[8], const bf16* A, int lda, const bf16* B, int ldb,
                                              int m0, int n0) {
  static_assert(KD % 16 == 0, "GEMM depth must be a multiple of 16");
#pragma unroll
  for (int k0 = 0; k0 < KD; k0 += 16) {
    unsigned a[4], b[4];
    load_a_frag<A_KM>(a, A, lda, m0, k0);
    load_b_frag<B_KN>(b, B, ldb, n0, k0);
    mma_16x16(acc, a, b);
  }
}
// Two products sharing B: acc0 += A0 B and acc1 += A1 B (A0, A1 of the same storage and lda), B's fragment
// loaded once per k-step (3 ldmatrix per 4 mma instead of 4).
template <int KD, bool A_KM, bool B_KN>
__device__ __forceinline__ void warp_tile_mma2(float (&acc0)[8], const bf16* A0, float (&acc1)[8], const bf16* A1,
                                               int lda, const bf16* B, int ldb, int m0, int n0) {
  static_assert(KD % 16 == 0, "GEMM depth must be a multiple of 16");
#pragma unroll
  for (int k0 = 0; k0 < KD; k0 += 16) {
    unsigned a0[4], a1[4], b[4];
    load_b_frag<B_KN>(b, B, ldb, n0, k0);
    load_a_frag<A_KM>(a0, A0, lda, m0, k0);
    load_a_frag<A_KM>(a1, A1, lda, m0, k0);
    mma_16x16(acc0, a0, b);
    mma_16x16(acc1, a1, b);
  }
}
// Position of the accumulator pair acc[2j], acc[2j+1] (j = 0..3) of warp_tile_mma's tile at (m0, n0).
__device__ __forceinline__ int tile_row(int m0, int j) { return m0 + (threadIdx.x % 32) / 4 + (j % 2) * 8; }
__device__ __forceinline__ int tile_col(int n0, int j) { return n0 + (j / 2) * 8 + (threadIdx.x % 4) * 2; }

// Stores a warp's 16 x 16 accumulator tile (warp_tile_mma's layout) at (m0, n0) of a row-major bf16 shared-memory
// tile [.][ld] (16-byte aligned rows): the same values at the same places as, per lane, store_bf16x2(D +
// tile_row(m0, j) * ld + tile_col(n0, j), acc[2j], acc[2j + 1]) for j = 0..3. sm_90+: one stmatrix.x4 instead of
// four 4-byte stores: pair j is 8 x 8 matrix j (rows + (j % 2) * 8, columns + (j / 2) * 8),
// lane l holds its row l / 4, columns 2 (l % 4) + {0, 1} (the mma C fragment = stmatrix's fragment), and lanes
// 8 j .. 8 j + 7 give matrix j's row addresses (load_a_frag<false>'s addressing). The whole warp calls it.
__device__ __forceinline__ void store_tile_bf16(bf16* D, int ld, int m0, int n0, const float (&acc)[8]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int lane = threadIdx.x % 32, mi = lane / 8, li = lane % 8;
  const unsigned a = smem_addr(D + (m0 + (mi % 2) * 8 + li) * ld + n0 + (mi / 2) * 8);
  unsigned r[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) r[j] = pack_bf16x2(acc[2 * j], acc[2 * j + 1]);
  stmatrix_x4(a, r);
#else
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    *reinterpret_cast<__nv_bfloat162*>(D + tile_row(m0, j) * ld + tile_col(n0, j)) =
        __floats2bfloat162_rn(acc[2 * j], acc[2 * j + 1]);
  }
#endif
}

// C[M x N] = A[M x KD] * B[KD x N] from shared memory, bf16 operands, fp32 accumulation, by NWARPS warps
// (storage as warp_tile_mma). Each warp owns 16x16 output tiles (round robin) and hands every result pair to
// epi(row, col, value(row, col), value(row, col + 1)); col is even. An output element is always handed to the
// same thread for the same <M, N, NWARPS>, so consecutive GEMMs of one shape may update an element without a
// barrier. No barrier inside: callers synchronise around the operands.
template <int M, int N, int KD, bool A_KM, bool B_KN, int NWARPS, class Epi>
__device__ __forceinline__ void smem_gemm(const bf16* A, int lda, const bf16* B, int ldb, Epi epi) {
  static_assert(M % 16 == 0 && N % 16 == 0 && KD % 16 == 0, "GEMM tile sizes must be multiples of 16");
  const int warp = threadIdx.x / 32;
  constexpr int kTilesN = N / 16;
  for (int t = warp; t < (M / 16) * kTilesN; t += NWARPS) {
    const int m0 = (t / kTilesN) * 16, n0 = (t % kTilesN) * 16;
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    warp_tile_mma<KD, A_KM, B_KN>(acc, A, lda, B, ldb, m0, n0);
#pragma unroll
    for (int j = 0; j < 4; ++j) epi(tile_row(m0, j), tile_col(n0, j), acc[2 * j], acc[2 * j + 1]);
  }
}

// D = A * B: A [M][M] row-major (lda; A_KM: stored transposed, A[m][k] at A + k lda + m), B [M][N] (ldb) and D [M][N]
// (ldd), bf16 in shared memory, fp32 accumulation, the product rounded to bf16. D may be B itself (the product written
// over its operand). Each warp owns whole 16-column strips (round robin): it computes every 16-row tile of its strip in
// registers (B's fragments loaded once per depth step for all of them), then stores them into D's strip
// (store_tile_bf16). Safe in place because the product's strip reads only that strip of B. For outputs that leave as
// whole rows (16-byte global stores) instead of the mma fragments' scattered 4-byte pairs. The whole block calls it; no
// barrier inside (callers put one between B's writes and this, and between this and reads of D by other warps).
template <int M, int N, int NWARPS, bool A_KM = false>
__device__ __forceinline__ void smem_gemm_into(const bf16* A, int lda, const bf16* B, int ldb, bf16* D, int ldd) {
  static_assert(M % 16 == 0 && N % (16 * NWARPS) == 0, "whole 16 x 16 tiles, the same strips for every warp");
  constexpr int kTilesM = M / 16;
  const int warp = threadIdx.x / 32;
#pragma unroll 1  // unrolled, the strips' live ranges overlap and gdn_chunk_prep spills on sm_90 (NVRTC)
  for (int e = 0; e < N / 16 / NWARPS; ++e) {
    const int n0 = (warp + e * NWARPS) * 16;
    float acc[kTilesM][8];
#pragma unroll
    for (int i = 0; i < kTilesM; ++i) {
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;
    }
#pragma unroll
    for (int k0 = 0; k0 < M; k0 += 16) {
      unsigned b[4];
      load_b_frag<true>(b, B, ldb, n0, k0);
#pragma unroll
      for (int i = 0; i < kTilesM; ++i) {
        unsigned a[4];
        load_a_frag<A_KM>(a, A, lda, i * 16, k0);
        mma_16x16(acc[i], a, b);
      }
    }
    __syncwarp();  // every lane's reads of the strip before any lane's stores (D may be B)
#pragma unroll
    for (int i = 0; i < kTilesM; ++i) store_tile_bf16(D, ldd, i * 16, n0, acc[i]);
  }
}

// Copies the first `valid` rows of a [ROWS][ld] bf16 shared-memory tile of 128 columns to global rows
// dst + r * row_stride (16-byte aligned) with 16-byte stores, a warp writing two whole rows per instruction.
// Called by all NTHREADS threads; no barrier inside.
template <int ROWS, int NTHREADS>
__device__ __forceinline__ void store_rows_global(const bf16* tile, int ld, int valid, bf16* __restrict__ dst,
                                                  long long row_stride) {
  constexpr int kVecPerRow = kDim / 8, kVecs = ROWS * kVecPerRow;
  static_assert(kVecs % NTHREADS == 0, "no remainder");
#pragma unroll
  for (int e = 0; e < kVecs / NTHREADS; ++e) {
    // Rows from the last: the row checks are not the ones of the callers' earlier loops over the same tile, which
    // the compiler would otherwise share and keep alive in predicate registers all the way here (spilling them).
    const int i = static_cast<int>(threadIdx.x) + e * NTHREADS, r = ROWS - 1 - i / kVecPerRow, c = (i % kVecPerRow) * 8;
    if (r < valid) {
      *reinterpret_cast<uint4*>(dst + r * row_stride + c) = *reinterpret_cast<const uint4*>(tile + r * ld + c);
    }
  }
}

// 8 bf16 (one 16-byte vector) times s, rounded back to bf16.
__device__ __forceinline__ uint4 scale_bf16x8(uint4 raw, float s) {
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 f = __bfloat1622float2(h[k]);
    h[k] = __floats2bfloat162_rn(f.x * s, f.y * s);
  }
  return raw;
}

__device__ __forceinline__ void store_bf16x2(bf16* p, float x, float y) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(x, y);
}

}  // namespace gdn
