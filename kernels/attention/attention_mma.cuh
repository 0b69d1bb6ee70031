// Warp-level building blocks of the attention kernels: cp.async copies, ldmatrix loads, mma.sync m16n8k16 bf16,
// the XOR swizzle of shared-memory tiles and the global<->shared tile copies. Only instructions that exist on
// sm_80, sm_90 and sm_120, so every attention kernel compiles for all three from one source.
// Who may include it: the attention kernels (device code only). Thread-safety: n/a (device code).
#pragma once

#include <cuda_bf16.h>

namespace dflash_attn {

typedef __nv_bfloat16 bf16;

__device__ __forceinline__ unsigned SmemAddr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16-byte async copy global -> shared; when !pred nothing is read and the 16 bytes are zero-filled.
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, bool pred) {
  int n = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SmemAddr(smem)), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void Ldmatrix4(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void Ldmatrix4Trans(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// d += a * b for one 16x8x16 tile: a row-major 16x16 (4 regs), b "col" 16x8 (2 regs), d fp32 16x8 (4 regs).
__device__ __forceinline__ void Mma16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ unsigned PackBf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<unsigned*>(&v);
}

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
    CpAsync16(smem + Swz<WIDTH>(r, c), src, ok);
  }
}

// p[0] += a, p[1] += b in global memory (p 8-byte aligned): one vector reduction on sm_90+, two atomics before.
__device__ __forceinline__ void AtomicAdd2(float* p, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(a), "f"(b) : "memory");
#else
  atomicAdd(p, a);
  atomicAdd(p + 1, b);
#endif
}

// +infinity without <cmath> (NVRTC has no INFINITY macro).
__device__ __forceinline__ float Inf() { return __int_as_float(0x7f800000); }

// 2^x with the hardware approximation (relative error ~2^-22); ex2(-inf) = +0.
__device__ __forceinline__ float FastExp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// The first index >= t in [t, n) whose tile class is not empty (n when none is left).
__device__ __forceinline__ int NextNonEmpty(const unsigned char* cls, int t, int n, int period) {
  while (t < n && cls[t % period] == 0) ++t;
  return t;
}

__device__ __forceinline__ float WarpQuadMax(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float WarpQuadSum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

}  // namespace dflash_attn
