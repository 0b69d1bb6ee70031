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
// 4-byte async copy global -> shared (through L1: .ca is the only cache mode of the 4- and 8-byte copies).
__device__ __forceinline__ void CpAsync4(void* smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(SmemAddr(smem)), "l"(gmem));
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

// A non-negative int (index, row, head) widened to 64 bits through unsigned: the same value, but the compiler knows
// the high half is 0, so a 64-bit product with it needs no sign half (session 7: ~2 instructions per product).
__device__ __forceinline__ long long WidenNonNeg(int x) { return static_cast<long long>(static_cast<unsigned>(x)); }

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

// LoadTileAsync for tiles whose chunks divide evenly among the threads with whole groups of 8 rows per pass
// (ROWS * WIDTH / 8 a multiple of NT, NT / (WIDTH / 8) a multiple of 8): every thread copies the same column chunk of
// rows r0, r0 + NT / (WIDTH / 8), ..., so its shared addresses differ by constants (the swizzle of row r0 + 8k is the
// swizzle of r0) and its global address by one running 64-bit step: no division, no per-row multiply (session 6:
// the generic loop cost tens of instructions per 16-byte copy in the backward item walk). Same contract as
// LoadTileAsync; ALL_ROWS: the caller knows valid_rows >= ROWS, so no copy needs the row check and the zero-fill
// source select (session 7: 2 selects and a compare per copy).
template <int ROWS, int WIDTH, int NT, bool ALL_ROWS = false>
__device__ __forceinline__ void LoadTileAsyncFixed(bf16* smem, const bf16* gmem, long long row_stride, int valid_rows,
                                                   int tid) {
  constexpr int kChunks = WIDTH / 8, kRowsPerPass = NT / kChunks, kPasses = ROWS / kRowsPerPass;
  static_assert(NT % kChunks == 0 && kRowsPerPass % 8 == 0 && ROWS % kRowsPerPass == 0, "fixed-trip tile copy");
  const int r0 = tid / kChunks, c = (tid % kChunks) * 8;
  bf16* dst = smem + Swz<WIDTH>(r0, c);
  const bf16* src = gmem + WidenNonNeg(r0) * row_stride + c;
  const long long step = kRowsPerPass * row_stride;
#pragma unroll
  for (int j = 0; j < kPasses; ++j) {
    const bool ok = ALL_ROWS || r0 + j * kRowsPerPass < valid_rows;
    CpAsync16(dst + j * kRowsPerPass * WIDTH, ok ? src : gmem, ok);
    src += step;
  }
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
  const unsigned a0 = SmemAddr(sA + Swz<WIDTH>(a_row0 + (lane & 15), (lane >> 4) * 8));
  const unsigned b0 = SmemAddr(sB + Swz<WIDTH>(b_row0 + (lane & 7) + (lane >> 4) * 8, ((lane >> 3) & 1) * 8));
  // Exactly the pre-session-6 code: the forward's register allocation depends on it.
#pragma unroll
  for (int kk = 0; kk < WIDTH / 16; ++kk) {
    unsigned a[MI][4];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) Ldmatrix4(a[mi], (a0 + mi * 16 * WIDTH * 2) ^ (kk << 5));
#pragma unroll
    for (int nj = 0; nj < NJ; nj += 2) {
      unsigned b[4];
      Ldmatrix4(b, (b0 + nj * 8 * WIDTH * 2) ^ (kk << 5));
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        Mma16816(acc[mi][nj], a[mi], b[0], b[1]);
        Mma16816(acc[mi][nj + 1], a[mi], b[2], b[3]);
      }
    }
  }
}

// WarpGemmABt with the four XOR patterns of k steps 0..3 precomputed per operand; steps 4..7 are the same + 128 bytes,
// so every fragment load is [register + immediate] (session 6: the 2-D backward spent 64 LOP3 per warp and item on
// the XORs). From precomputed step-0 byte addresses a0 / b0 (as WarpGemmABt computes them) plus
// byte offsets a_off / b_off of the tiles actually read: (a0 ^ x) + a_off = (a0 + a_off) ^ x for tile offsets that
// are multiples of 256 bytes, so two products whose tiles sit a constant apart (K and V; Q and dO) share the XOR
// bases and differ only by immediates (session 7).
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
    for (int mi = 0; mi < MI; ++mi) Ldmatrix4(a[mi], ak + mi * 16 * WIDTH * 2);
#pragma unroll
    for (int nj = 0; nj < NJ; nj += 2) {
      unsigned b[4];
      Ldmatrix4(b, bk + nj * 8 * WIDTH * 2);
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        Mma16816(acc[mi][nj], a[mi], b[0], b[1]);
        Mma16816(acc[mi][nj + 1], a[mi], b[2], b[3]);
      }
    }
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

// if (pred) { p[0] += a; p[1] += b; } in global memory (p 8-byte aligned): on sm_90+ one vector reduction under a
// PTX predicate, so the caller's address arithmetic stays outside any branch (session 6: with `if (row < rows)`
// around a reduction, the compiler sank the 64-bit address computation into each branch, ~10 instructions per tile).
__device__ __forceinline__ void AtomicAdd2If(float* p, float a, float b, bool pred) {
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

// +infinity without <cmath> (NVRTC has no INFINITY macro).
__device__ __forceinline__ float Inf() { return __int_as_float(0x7f800000); }

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

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
