// PTX wrappers shared by the kernel families: the warp-level instructions the attention and gdn kernels are built
// from (cp.async copies and their groups, ldmatrix / stmatrix, mma.sync m16n8k16 bf16, vector reductions,
// ex2.approx), one inline-asm function per instruction form, named after the instruction (snake_case, as the PTX
// mnemonic reads). Everything here exists on sm_80, sm_90 and sm_120 unless marked sm_90+, so a kernel built on it
// compiles for all of them from one source. Family headers (attention_mma.cuh, gdn_common.cuh) build tiles, GEMMs
// and layouts on top; nothing family-specific lives here.
//
// Memory clobbers state what an instruction does to memory that its operands do not show the compiler:
//   cp.async copies, commit_group, wait_group   "memory". A copy writes shared memory behind the compiler's back
//       and wait_group is where those writes become visible to the issuing thread: with the clobber the compiler
//       neither moves a shared-memory access of this thread across a copy nor hoists a read of landed data above
//       the wait (the attention backward's BwdFinishItemRows reads a thread's own LSE copies between the wait and
//       the barrier that publishes them to the block).
//   stmatrix, red                               "memory" (they write memory).
//   ldmatrix                                    none. It reads shared memory that a barrier has published
//       (__syncthreads / __syncwarp are compiler barriers too); a clobber on every fragment load would forbid the
//       compiler to keep any value in a register across it. A caller orders its own plain shared-memory stores
//       before an ldmatrix of the same bytes with such a barrier.
//   mma.sync, ex2.approx                        none (registers only; ex2 is not even volatile).
// Shared-memory operands are 32-bit shared-window addresses (smem_addr), so callers can step them with 32-bit adds
// and XORs and fold constant offsets into the instructions' immediates.
//
// Beside this header go the Hopper tier's warpgroup wrappers (wgmma, TMA, mbarrier), one header per instruction
// family, each including this one for smem_addr: they exist only on sm_90a, so a kernel that must also compile
// for sm_120 never includes them.
// Who may include it: the kernel sources of every family (NVRTC, device code only; each family embeds this file:
// tools/cmake/EmbedSources.cmake). Thread-safety: n/a (device code; each wrapper says which threads call it).
#pragma once

#include <cuda_bf16.h>

namespace dflash_ptx {

// The shared-window address of a pointer into shared memory (what cp.async, ldmatrix and stmatrix take).
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// A non-negative int (index, row, head) widened to 64 bits through unsigned: the same value, but the compiler knows
// the high half is 0, so a 64-bit product with it needs no sign half (~2 instructions fewer per product).
__device__ __forceinline__ long long WidenNonNeg(int x) { return static_cast<long long>(static_cast<unsigned>(x)); }

// ---- cp.async: global -> shared copies that complete asynchronously, in commit groups per thread ----
// The copies take the source as a pointer to its own element type T: NVVM keeps that type up to the asm operand,
// and a conversion to const void* on the way changed the address arithmetic around the copies (sm_90
// gdn_chunk_fused<32, 64, 8, 1>: 24 more integer instructions).

// 16 bytes global -> shared through L2 only (.cg).
template <class T>
__device__ __forceinline__ void cp_async_cg_16(unsigned saddr, const T* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(saddr), "l"(gmem) : "memory");
}
// 16 bytes global -> shared reading src_bytes of them (16, or 0: nothing is read, gmem must still be a valid
// address, and the 16 bytes are zero-filled).
template <class T>
__device__ __forceinline__ void cp_async_cg_16_zfill(unsigned saddr, const T* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(gmem), "r"(src_bytes)
               : "memory");
}
// 4 bytes global -> shared through L1 (.ca: the only cache mode of the 4- and 8-byte copies).
template <class T>
__device__ __forceinline__ void cp_async_ca_4(unsigned saddr, const T* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(saddr), "l"(gmem) : "memory");
}
// 8 bytes global -> shared through L1 reading src_bytes of them (8, or 0: nothing is read, gmem must still be a
// valid address, and the 8 bytes are zero-filled).
template <class T>
__device__ __forceinline__ void cp_async_ca_8_zfill(unsigned saddr, const T* gmem, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(saddr), "l"(gmem), "r"(src_bytes)
               : "memory");
}
// Closes this thread's group of copies issued since the last commit.
__device__ __forceinline__ void cp_async_commit_group() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N committed groups of this thread are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// Commits this thread's open copies and waits for all of them (cp.async.wait_all).
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// ---- ldmatrix / stmatrix: 8 x 8 b16 matrices between shared memory and the mma fragment layout (whole warp) ----

// Four 8 x 8 matrices; lanes 8 j .. 8 j + 7 give the row addresses of matrix j, r[j] receives its fragment.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned saddr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(saddr));
}
// ldmatrix_x4 of the transposed matrices.
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned saddr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(saddr));
}
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// sm_90+: the inverse of ldmatrix_x4: r[j] (this lane's fragment of matrix j) to the rows lanes 8 j .. 8 j + 7 give.
__device__ __forceinline__ void stmatrix_x4(unsigned saddr, const unsigned (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(saddr), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}
#endif

// ---- mma.sync (whole warp) ----

// Two floats as the bf16 pair of one mma operand register (lo in the low half), rounded to nearest even.
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<unsigned*>(&v);
}
// d += a * b for one 16 x 8 x 16 tile: a row-major 16 x 16 bf16 (4 registers), b "col" 16 x 8 bf16 (2 registers),
// d fp32 16 x 8: lane l holds row l / 4, columns 2 (l % 4) + {0, 1} in d0, d1 and row l / 4 + 8 in d2, d3.
__device__ __forceinline__ void mma_m16n8k16_bf16(float& d0, float& d1, float& d2, float& d3, const unsigned (&a)[4],
                                                  unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  mma_m16n8k16_bf16(d[0], d[1], d[2], d[3], a, b0, b1);
}

// ---- reductions into global memory ----

// p[0] += a, p[1] += b (p 8-byte aligned): one red.global.add.v2.f32 on sm_90+, two atomics before.
__device__ __forceinline__ void red_global_add_v2_f32(float* p, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(a), "f"(b) : "memory");
#else
  atomicAdd(p, a);
  atomicAdd(p + 1, b);
#endif
}
// if (pred) red_global_add_v2_f32(p, a, b), on sm_90+ under a PTX predicate: the caller's address arithmetic stays
// outside any branch (with `if (pred)` around the reduction the compiler sinks the 64-bit address computation into
// the branch: ~10 more instructions per 16 x 8 accumulator tile in the 2-D attention backward).
__device__ __forceinline__ void red_global_add_v2_f32_if(float* p, float a, float b, bool pred) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n.reg .pred q;\nsetp.ne.b32 q, %3, 0;\n@q red.global.add.v2.f32 [%0], {%1, %2};\n}\n" ::"l"(p), "f"(a),
      "f"(b), "r"(static_cast<int>(pred))
      : "memory");
#else
  if (pred) {
    atomicAdd(p, a);
    atomicAdd(p + 1, b);
  }
#endif
}

// ---- special functions ----

// 2^x with the hardware approximation (relative error ~2^-22, denormals flushed); ex2(-inf) = +0.
__device__ __forceinline__ float ex2_approx_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace dflash_ptx
