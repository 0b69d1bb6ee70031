// Hopper's warpgroup matrix multiply (wgmma, sm_90a only): shared-memory matrix descriptors for the 128-byte
// swizzled tile layout, the fence / commit / wait instructions, and m64nNk16 bf16 -> fp32 products with B (and A,
// or A from registers) read straight from shared memory by the whole warpgroup. One wrapper per instruction form,
// named after it; the explicit operand lists (PTX names every accumulator register) are written out per shape N.
//
// The tile layout (Sw128Offset) is the one the tensor copy engine writes with CU_TENSOR_MAP_SWIZZLE_128B and a box
// 64 bf16 wide: a [ROWS x COLS] bf16 tile is COLS / 64 column blocks of [ROWS x 64], block after block; row r of a
// block is 128 contiguous bytes whose 16-byte chunk c sits at chunk c ^ (r % 8). Tiles start 1024-byte aligned (the
// swizzle is a function of the address bits). The same bytes serve both operand majors:
//   K-major (A = Q, B = K: the reduction dim along the row): 16 k-columns are 32 bytes of one 128-byte row, so
//     k-step kk starts at block kk / 4, byte 32 * (kk % 4); core-matrix groups of 8 rows are 1024 bytes apart (SBO).
//   MN-major (B = V, or a transposed A, the reduction dim down the rows): k-step kk (16 rows) starts 2048 * kk bytes
//     into every block; 8-row groups are 1024 bytes apart (SBO), column blocks ROWS * 128 bytes apart (LBO).
// Accumulator registers of an m64nN product: thread t of the warpgroup holds d[4 j + e] = element (row 16 (t / 32)
// + (t % 32) / 4 + 8 (e / 2), column 8 j + 2 (t % 4) + e % 2): per warp, exactly mma.sync m16n8's C fragments
// side by side; an A operand from registers is mma.sync m16n8k16's A fragment of the warp's 16 rows.
// Ordering (the caller's duty): shared-memory data written by ordinary stores or cp.async is made visible to the
// wgmma (async proxy) by fence_proxy_async_shared() in the writing threads before the barrier that publishes it;
// wgmma_fence() before the first product of a batch whose accumulators or A registers other instructions touched;
// accumulators are read only after wgmma_wait<N> covers their products.
// Who may include it: kernels compiled for sm_90a only (NVRTC). Thread-safety: n/a (device code; every function
// here is called by all 128 threads of a warpgroup together, except the pure address helpers).
#pragma once

#include "ptx.cuh"

namespace dflash_ptx {

// Byte offset of element (r, c) in a [ROWS x COLS] bf16 tile in the 128-byte swizzled layout (COLS % 64 == 0).
template <int ROWS>
__host__ __device__ __forceinline__ constexpr int Sw128Offset(int r, int c) {
  return (c >> 6) * ROWS * 128 + r * 128 + ((((c & 63) >> 3) ^ (r & 7)) << 4) + (c & 7) * 2;
}

// The matrix descriptor of a 128-byte swizzled operand starting at shared address saddr (bits 0-13: address >> 4,
// 16-29: leading byte offset >> 4, 32-45: stride byte offset >> 4, 62-63: swizzle mode, 1 = 128 bytes).
__host__ __device__ __forceinline__ constexpr unsigned long long wgmma_desc_sw128(unsigned saddr, unsigned lbo_bytes,
                                                                                  unsigned sbo_bytes) {
  return static_cast<unsigned long long>((saddr & 0x3FFFF) >> 4) |
         (static_cast<unsigned long long>((lbo_bytes >> 4) & 0x3FFF) << 16) |
         (static_cast<unsigned long long>((sbo_bytes >> 4) & 0x3FFF) << 32) | (1ull << 62);
}

// The descriptor of the operand `bytes` (a multiple of 16) further on: the same word as wgmma_desc_sw128 built at
// saddr + bytes, because every shared-window address is below 2^18 (228 KiB), so adding bytes >> 4 to the address
// field never carries into the leading byte offset above it. Added to the low 32-bit half only: one 32-bit add of a
// constant where a fresh descriptor masks and shifts the whole address again.
__host__ __device__ __forceinline__ constexpr unsigned long long wgmma_desc_advance(unsigned long long desc,
                                                                                    unsigned bytes) {
  return (desc & 0xFFFFFFFF00000000ull) | static_cast<unsigned>(static_cast<unsigned>(desc) + (bytes >> 4));
}

// Byte offsets of k-step kk in a [ROWS x COLS] swizzled tile: K-major (rows from row0, a multiple of 8) and MN-major.
template <int ROWS>
__host__ __device__ __forceinline__ constexpr unsigned wgmma_k_major_offset(int row0, int kk) {
  return (kk >> 2) * ROWS * 128 + row0 * 128 + (kk & 3) * 32;
}
__host__ __device__ __forceinline__ constexpr unsigned wgmma_mn_major_offset(int kk) { return kk * 2048; }

// K-major operand of k-step kk of a [ROWS x COLS] swizzled tile at shared address tile (ROWS rows from `row0`,
// a multiple of 8: A = 64 rows of a warpgroup, B = all N rows).
template <int ROWS>
__host__ __device__ __forceinline__ constexpr unsigned long long wgmma_desc_k_major(unsigned tile, int row0, int kk) {
  return wgmma_desc_sw128(tile + wgmma_k_major_offset<ROWS>(row0, kk), 16, 1024);
}
// MN-major operand (a transposed B or A) of k-step kk (rows 16 kk .. 16 kk + 15) of a [ROWS x COLS] swizzled tile.
template <int ROWS>
__host__ __device__ __forceinline__ constexpr unsigned long long wgmma_desc_mn_major(unsigned tile, int kk) {
  return wgmma_desc_sw128(tile + wgmma_mn_major_offset(kk), ROWS * 128, 1024);
}
// k-step kk's descriptor of a product's operand, stepped: k-step 0's descriptor plus one add (written per k-step,
// the compiler builds the base once for a product's unrolled k-steps; the same words as wgmma_desc_k_major /
// wgmma_desc_mn_major, tests/kernels/wgmma_desc_test.cc). The gdn wgmma pass steps its descriptors; attention
// builds them afresh (stepped, its kernels issued ~20-30 % fewer instructions and ran no faster:
// kernels/attention/NOTES.md). Where a stepped base lives is the caller's choice: hoisted out of a loop it holds
// registers across it (the attention backward's consumers, at 240 registers, spilled when every descriptor was
// stepped with the K / V bases loop-invariant).
template <int ROWS>
__host__ __device__ __forceinline__ constexpr unsigned long long wgmma_desc_k_major_stepped(unsigned tile, int row0,
                                                                                            int kk) {
  return wgmma_desc_advance(wgmma_desc_k_major<ROWS>(tile, row0, 0), wgmma_k_major_offset<ROWS>(0, kk));
}
template <int ROWS>
__host__ __device__ __forceinline__ constexpr unsigned long long wgmma_desc_mn_major_stepped(unsigned tile, int kk) {
  return wgmma_desc_advance(wgmma_desc_mn_major<ROWS>(tile, 0), wgmma_mn_major_offset(kk));
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit_group() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most N committed groups of this warpgroup are pending.
template <int N>
__device__ __forceinline__ void wgmma_wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Pins accumulator registers in place around an in-flight product (an empty asm that reads and writes each): the
// compiler may not move or copy d across it, so a value it sees is the one the wgmma_wait_group delivered.
template <int N>
__device__ __forceinline__ void wgmma_fence_operand(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// The same for A-operand registers (bf16 pairs) of an in-flight register-A product: the hardware reads them after
// the issue, so they must stay in place until the wait that covers it.
template <int M, int N>
__device__ __forceinline__ void wgmma_fence_operand(unsigned (&a)[M][N]) {
#pragma unroll
  for (int i = 0; i < M; ++i)
#pragma unroll
    for (int j = 0; j < N; ++j) asm volatile("" : "+r"(a[i][j])::"memory");
}
// Orders this thread's generic-proxy shared-memory writes (stores, completed cp.async) before later async-proxy
// reads (wgmma, bulk copies) of them, once a barrier has been passed.
__device__ __forceinline__ void fence_proxy_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// The accumulator registers are the "+f" operands: the compiler keeps them in place from issue to wait, so a
// caller must not read or write d between a product and the wgmma_wait_group that covers it.
// d (+)= A B, A from shared memory (TRANS_A 0: K-major; 1: MN-major, a transposed A), B from shared memory (TRANS_B
// 0: K-major; 1: MN-major), N = 64 / 128.
template <int N>
struct WgmmaSS;
// d (+)= A B, A from registers (a: the warp's m16n8k16 A fragment), B from shared memory, N = 32 / 64 / 128 / 256.
template <int N>
struct WgmmaRS;

template <>
struct WgmmaSS<64> {
  template <int TRANS_B, int TRANS_A = 0>
  static __device__ __forceinline__ void Run(float (&d)[32], unsigned long long desc_a, unsigned long long desc_b, int accumulate) {
    asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, %36, %35;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TRANS_B), "n"(TRANS_A));
  }
};

template <>
struct WgmmaSS<128> {
  template <int TRANS_B, int TRANS_A = 0>
  static __device__ __forceinline__ void Run(float (&d)[64], unsigned long long desc_a, unsigned long long desc_b, int accumulate) {
    asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, %68, %67;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TRANS_B), "n"(TRANS_A));
  }
};

template <>
struct WgmmaRS<32> {
  template <int TRANS_B>
  static __device__ __forceinline__ void Run(float (&d)[16], const unsigned (&a)[4], unsigned long long desc_b, int accumulate) {
    asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(TRANS_B));
  }
};

template <>
struct WgmmaRS<64> {
  template <int TRANS_B>
  static __device__ __forceinline__ void Run(float (&d)[32], const unsigned (&a)[4], unsigned long long desc_b, int accumulate) {
    asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(TRANS_B));
  }
};

template <>
struct WgmmaRS<128> {
  template <int TRANS_B>
  static __device__ __forceinline__ void Run(float (&d)[64], const unsigned (&a)[4], unsigned long long desc_b, int accumulate) {
    asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(TRANS_B));
  }
};

template <>
struct WgmmaRS<256> {
  template <int TRANS_B>
  static __device__ __forceinline__ void Run(float (&d)[128], const unsigned (&a)[4], unsigned long long desc_b, int accumulate) {
    asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1, %134;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(TRANS_B));
  }
};

// d = A B over K = 16 KSTEPS with both operands K-major in swizzled tiles (the reduction dim along the rows): A =
// rows [a_row0, a_row0 + 64) of an [A_ROWS x K] tile, B = all N rows of an [N x K] tile; the first step overwrites
// d. Issues the products only: the caller fences before and commits after.
template <int N, int A_ROWS, int KSTEPS>
__device__ __forceinline__ void WgmmaSSKMajor(float (&d)[N / 2], unsigned a_tile, int a_row0, unsigned b_tile) {
#pragma unroll
  for (int kk = 0; kk < KSTEPS; ++kk)
    WgmmaSS<N>::template Run<0>(d, wgmma_desc_k_major<A_ROWS>(a_tile, a_row0, kk), wgmma_desc_k_major<N>(b_tile, 0, kk),
                                kk > 0);
}

}  // namespace dflash_ptx
