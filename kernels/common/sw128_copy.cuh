// Global -> shared tile copies into the 128-byte swizzled layout that wgmma's descriptors read (Sw128Offset,
// wgmma.cuh), on cp.async (16-byte copies that zero-fill the rows past a tile's valid ones). Shared by the Hopper
// tiers of the attention and gdn families.
// Who may include it: kernels compiled for sm_90a (NVRTC, device code only). Thread-safety: n/a (device code; every
// copy is called by all NT threads of the block together and completes at the caller's cp.async wait).
#pragma once

#include "ptx.cuh"
#include "wgmma.cuh"

namespace dflash_ptx {

// Copies rows [0, ROWS) x [0, COLS) of a bf16 matrix (row r at gmem + r * row_stride) into a 128-byte swizzled
// tile (Sw128Offset); rows >= valid_rows are zero-filled. All NT threads call it; completes at the next wait.
template <int ROWS, int COLS, int NT>
__device__ __forceinline__ void LoadSw128Async(unsigned saddr, const __nv_bfloat16* gmem, long long row_stride,
                                               int valid_rows, int tid) {
  constexpr int kChunks = COLS / 8;
#pragma unroll 4
  for (int i = tid; i < ROWS * kChunks; i += NT) {
    const int r = i / kChunks, c = (i % kChunks) * 8;
    const bool ok = r < valid_rows;
    cp_async_cg_16_zfill(saddr + Sw128Offset<ROWS>(r, c), ok ? gmem + r * row_stride + c : gmem, ok ? 16 : 0);
  }
}

// LoadSw128Async for tiles whose 16-byte chunks divide evenly among the threads in whole groups of 8 rows per pass:
// each thread copies one column chunk of rows r0, r0 + NT / (COLS / 8), ...; rows 8 apart have the same swizzle, so
// its shared addresses differ by constants and its global address by one running step (no division per copy).
// ALL_ROWS: the caller knows valid_rows >= ROWS (no row check, no zero-fill select). TILE_ROWS: the rows of the
// swizzled tile the copy lands in (its column blocks' stride), when the ROWS copied are a band of a taller tile:
// saddr then points at the band's first row (a multiple of 8 rows into the tile, so the swizzle is unchanged).
template <int ROWS, int COLS, int NT, bool ALL_ROWS, int TILE_ROWS = ROWS>
__device__ __forceinline__ void LoadSw128AsyncFixed(unsigned saddr, const __nv_bfloat16* gmem, long long row_stride,
                                                    int valid_rows, int tid) {
  constexpr int kChunks = COLS / 8, kRowsPerPass = NT / kChunks, kPasses = ROWS / kRowsPerPass;
  static_assert(NT % kChunks == 0 && kRowsPerPass % 8 == 0 && ROWS % kRowsPerPass == 0, "fixed-trip tile copy");
  static_assert(TILE_ROWS >= ROWS && TILE_ROWS % 8 == 0, "a band of whole 8-row swizzle groups");
  const int r0 = tid / kChunks, c = (tid % kChunks) * 8;
  const unsigned dst = saddr + Sw128Offset<TILE_ROWS>(r0, c);
  const __nv_bfloat16* src = gmem + WidenNonNeg(r0) * row_stride + c;
  const long long step = kRowsPerPass * row_stride;
#pragma unroll
  for (int j = 0; j < kPasses; ++j) {
    const bool ok = ALL_ROWS || r0 + j * kRowsPerPass < valid_rows;
    cp_async_cg_16_zfill(dst + j * kRowsPerPass * 128, ok ? src : gmem, ok ? 16 : 0);
    src += step;
  }
}

}  // namespace dflash_ptx
