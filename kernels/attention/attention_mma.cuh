// Warp-level building blocks of the attention kernels on top of the shared PTX wrappers (ptx.cuh): the XOR swizzle
// of shared-memory tiles, the global -> shared tile copies, the warp GEMMs on mma.sync m16n8k16 bf16 fed by
// ldmatrix, and the softmax's small math (infinity, log2 constants, quad reductions). Only instructions that exist
// on sm_80, sm_90 and sm_120, so every attention kernel compiles for all three from one source.
// Who may include it: the attention kernels (device code only). Thread-safety: n/a (device code).
#pragma once

#include <cuda_bf16.h>

#include "ptx.cuh"

namespace dflash_attn {

using namespace dflash_ptx;  // the PTX wrappers, unqualified in the kernels

typedef __nv_bfloat16 bf16;

// Element offset of (row, col) in a shared tile of rows of WIDTH bf16 elements, with the 16-byte chunks of each
// row XOR-swizzled by the row so that ldmatrix's 8 row addresses fall in different banks.
template <int WIDTH>
__device__ __forceinline__ int Swz(int row, int col) {
  constexpr int kChunks = WIDTH / 8;
  constexpr int kMask = (kChunks < 8 ? kChunks : 8) - 1;
  return row * WIDTH + ((((col >> 3) ^ (row & kMask))) << 3) + (col & 7);
}

// Copies rows [0, ROWS) x [0, WIDTH) of a bf16 matrix (row r at gmem + r * row_stride) into a swizzled shared
// tile; rows >= valid_rows are zero-filled. Must be called by all NT threads; completes at the next wait.
template <int ROWS, int WIDTH, int NT>
__device__ __forceinline__ void LoadTileAsync(bf16* smem, const bf16* gmem, long long row_stride, int valid_rows,
                                              int tid) {
  constexpr int kChunks = WIDTH / 8;
  for (int i = tid; i < ROWS * kChunks; i += NT) {
    int r = i / kChunks, c = (i % kChunks) * 8;
    bool ok = r < valid_rows;
    const bf16* src = ok ? gmem + r * row_stride + c : gmem;
    cp_async_cg_16_zfill(smem_addr(smem + Swz<WIDTH>(r, c)), src, ok ? 16 : 0);
  }
}

// Whether LoadTileAsyncFixed below can copy a ROWS x WIDTH tile with NT threads: its chunks divide evenly among
// the threads in whole groups of 8 rows per pass.
template <int ROWS, int WIDTH, int NT>
constexpr bool kFixedTripTile =
    NT % (WIDTH / 8) == 0 && (NT / (WIDTH / 8)) % 8 == 0 && ROWS % (NT / (WIDTH / 8)) == 0;

// LoadTileAsync for tiles whose chunks divide evenly among the threads with whole groups of 8 rows per pass
// (ROWS * WIDTH / 8 a multiple of NT, NT / (WIDTH / 8) a multiple of 8): every thread copies the same column chunk of
// rows r0, r0 + NT / (WIDTH / 8), ..., so its shared addresses differ by constants (the swizzle of row r0 + 8k is the
// swizzle of r0) and its global address by one running 64-bit step: no division, no per-row multiply (the generic
// loop costs tens of instructions per 16-byte copy in the backward item walk). Same contract as LoadTileAsync;
// ALL_ROWS: the caller knows valid_rows >= ROWS, so no copy needs the row check and the zero-fill source select
// (2 selects and a compare per copy).
template <int ROWS, int WIDTH, int NT, bool ALL_ROWS = false>
__device__ __forceinline__ void LoadTileAsyncFixed(bf16* smem, const bf16* gmem, long long row_stride, int valid_rows,
                                                   int tid) {
  constexpr int kChunks = WIDTH / 8, kRowsPerPass = NT / kChunks, kPasses = ROWS / kRowsPerPass;
  static_assert(kFixedTripTile<ROWS, WIDTH, NT>, "fixed-trip tile copy");
  const int r0 = tid / kChunks, c = (tid % kChunks) * 8;
  bf16* dst = smem + Swz<WIDTH>(r0, c);
  const bf16* src = gmem + WidenNonNeg(r0) * row_stride + c;
  const long long step = kRowsPerPass * row_stride;
#pragma unroll
  for (int j = 0; j < kPasses; ++j) {
    const bool ok = ALL_ROWS || r0 + j * kRowsPerPass < valid_rows;
    cp_async_cg_16_zfill(smem_addr(dst + j * kRowsPerPass * WIDTH), ok ? src : gmem, ok ? 16 : 0);
    src += step;
  }
}

// The tile copy to use: LoadTileAsyncFixed where the tile shape allows it, else the generic LoadTileAsync (head dim
// 256 at 4 warps, some backward query tiles). The fixed-trip copy costs ~5 instructions a 16-byte copy, the generic
// loop ~25 (in the portable forward's kv walk, 12-13 % of its time). Same contract as LoadTileAsync; ALL_ROWS as in
// LoadTileAsyncFixed (ignored by the generic loop).
template <int ROWS, int WIDTH, int NT, bool ALL_ROWS = false>
__device__ __forceinline__ void LoadTileAsyncPreferFixed(bf16* smem, const bf16* gmem, long long row_stride,
                                                         int valid_rows, int tid) {
  if constexpr (kFixedTripTile<ROWS, WIDTH, NT>)
    LoadTileAsyncFixed<ROWS, WIDTH, NT, ALL_ROWS>(smem, gmem, row_stride, valid_rows, tid);
  else
    LoadTileAsync<ROWS, WIDTH, NT>(smem, gmem, row_stride, valid_rows, tid);
}

// acc[MI][NJ][4] += A B^T for one warp: A = rows [a_row0, a_row0 + 16 MI) of the swizzled shared tile sA,
// B = rows [b_row0, b_row0 + 8 NJ) of the swizzled shared tile sB; both row-major with K = WIDTH columns.
// acc[mi][nj] is the 16x8 mma accumulator tile of A rows 16 mi.., B rows 8 nj...
// One address register per operand and one XOR per fragment load (fewest registers; the forward).
// WarpGemmABtXor4 below trades 6 registers for [register + immediate] fragment loads.
template <int WIDTH, int MI, int NJ>
__device__ __forceinline__ void WarpGemmABt(float (&acc)[MI][NJ][4], const bf16* sA, int a_row0, const bf16* sB,
                                            int b_row0, int lane) {
  static_assert(NJ % 2 == 0 && WIDTH % 16 == 0, "pairs of n-tiles, k steps of 16");
  // Byte addresses of k step 0; step kk is step 0 with the 16-byte chunk index XOR 2 kk (Swz keeps the chunk's low
  // 3 bits XOR the row's and 2 kk + half = 2 kk ^ half), i.e. the byte offset XOR 32 kk for rows of >= 128 bytes:
  // one register per fragment row instead of one per (row, k step). Tiles start 256-byte aligned. With rows of 256
  // bytes (WIDTH 128) bit 7 of a step-0 address is 0 (chunk < 8), so XOR 32 kk = XOR 32 (kk & 3) + 128 (kk >> 2).
  static_assert(WIDTH >= 64, "the XOR step needs rows of at least 8 chunks");
  const unsigned a0 = smem_addr(sA + Swz<WIDTH>(a_row0 + (lane & 15), (lane >> 4) * 8));
  const unsigned b0 = smem_addr(sB + Swz<WIDTH>(b_row0 + (lane & 7) + (lane >> 4) * 8, ((lane >> 3) & 1) * 8));
  // Keep this loop as it is: the forward's register allocation depends on its exact form.
#pragma unroll
  for (int kk = 0; kk < WIDTH / 16; ++kk) {
    unsigned a[MI][4];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) ldmatrix_x4(a[mi], (a0 + mi * 16 * WIDTH * 2) ^ (kk << 5));
#pragma unroll
    for (int nj = 0; nj < NJ; nj += 2) {
      unsigned b[4];
      ldmatrix_x4(b, (b0 + nj * 8 * WIDTH * 2) ^ (kk << 5));
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        mma_m16n8k16_bf16(acc[mi][nj], a[mi], b[0], b[1]);
        mma_m16n8k16_bf16(acc[mi][nj + 1], a[mi], b[2], b[3]);
      }
    }
  }
}

// WarpGemmABt with the four XOR patterns of k steps 0..3 precomputed per operand; steps 4..7 are the same + 128 bytes,
// so every fragment load is [register + immediate] (with WarpGemmABt's XORs the 2-D backward spends 64 LOP3 per
// warp and item on them). From precomputed step-0 byte addresses a0 / b0 (as WarpGemmABt computes them) plus
// byte offsets a_off / b_off of the tiles actually read: (a0 ^ x) + a_off = (a0 + a_off) ^ x for tile offsets that
// are multiples of 256 bytes, so two products whose tiles sit a constant apart (K and V; Q and dO) share the XOR
// bases and differ only by immediates.
template <int WIDTH, int MI, int NJ>
__device__ __forceinline__ void WarpGemmABtXor4(float (&acc)[MI][NJ][4], unsigned a0, unsigned a_off, unsigned b0,
                                                unsigned b_off) {
  static_assert(NJ % 2 == 0 && WIDTH == 128, "pairs of n-tiles, rows of 256 bytes");
#pragma unroll
  for (int kk = 0; kk < WIDTH / 16; ++kk) {
    const unsigned ak = (a0 ^ ((kk % 4) << 5)) + (kk / 4) * 128 + a_off;
    const unsigned bk = (b0 ^ ((kk % 4) << 5)) + (kk / 4) * 128 + b_off;
    unsigned a[MI][4];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) ldmatrix_x4(a[mi], ak + mi * 16 * WIDTH * 2);
#pragma unroll
    for (int nj = 0; nj < NJ; nj += 2) {
      unsigned b[4];
      ldmatrix_x4(b, bk + nj * 8 * WIDTH * 2);
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        mma_m16n8k16_bf16(acc[mi][nj], a[mi], b[0], b[1]);
        mma_m16n8k16_bf16(acc[mi][nj + 1], a[mi], b[2], b[3]);
      }
    }
  }
}

// +infinity without <cmath> (NVRTC has no INFINITY macro).
__device__ __forceinline__ float Inf() { return __int_as_float(0x7f800000); }

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ float WarpQuadMax(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float WarpQuadSum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

}  // namespace dflash_attn
