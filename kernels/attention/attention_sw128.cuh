// The backward item walk's TileCopy policy for the Hopper tier's wgmma operands: the cp.async copies into the
// 128-byte swizzled layout (kernels/common/sw128_copy.cuh) and the proxy fence that orders them before the wgmma.
// Who may include it: the sm_90a attention kernels (device code only). Thread-safety: n/a (device code).
#pragma once

#include "attention_mma.cuh"
#include "sw128_copy.cuh"

namespace dflash_attn {

// The backward item walk's TileCopy policy (attention_bwd_items.cuh) for wgmma operands: the 128-byte swizzled
// layout, and the proxy fence that orders the landed copies before the wgmma (async proxy) reads them.
struct Sw128TileCopy {
  template <int ROWS, int COLS, int NT>
  static __device__ __forceinline__ void LoadKv(bf16* smem, const bf16* gmem, long long row_stride, int valid_rows,
                                                int tid) {
    LoadSw128AsyncFixed<ROWS, COLS, NT, false>(smem_addr(smem), gmem, row_stride, valid_rows, tid);
  }
  template <int ROWS, int COLS, int NT, bool ALL_ROWS>
  static __device__ __forceinline__ void LoadQuery(bf16* smem, const bf16* gmem, long long row_stride,
                                                   int valid_rows, int tid) {
    LoadSw128AsyncFixed<ROWS, COLS, NT, ALL_ROWS>(smem_addr(smem), gmem, row_stride, valid_rows, tid);
  }
  static __device__ __forceinline__ void Landed() { fence_proxy_async_shared(); }
};

}  // namespace dflash_attn
