// Vectors of bf16 values for the row-wise kernel families (rmsnorm, rope): VEC values packed as VEC / 2 32-bit
// words (element 2k in the low half of word k, as memory holds them), moved as one 8- or 16-byte access, read as
// fp32 exactly, and rounded back from fp32 to nearest even. Words rather than a union of halves: NVVM keeps the words
// in registers, where a union written by halves and read as a vector went through local memory (a "spill" ptxas
// reports).
// Owns: nothing but these helpers (NVRTC device code; free of host headers). Thread-safety: n/a (device code).
#pragma once

#include <cuda_bf16.h>

namespace dflash_bf16 {

template <int VEC>
struct Pack {
  static_assert(VEC == 4 || VEC == 8, "vector width is 4 or 8 bf16 (8 or 16 bytes)");
  unsigned int w[VEC / 2];

  // Element e as fp32 (exact).
  __device__ __forceinline__ float elem(int e) const {
    const unsigned int u = w[e / 2];
    return __uint_as_float(e % 2 != 0 ? (u & 0xFFFF0000u) : (u << 16));
  }
};

template <int VEC>
__device__ __forceinline__ Pack<VEC> zero_pack() {
  Pack<VEC> p;
#pragma unroll
  for (int k = 0; k < VEC / 2; ++k) p.w[k] = 0u;
  return p;
}

// VEC bf16 values through the read-only data path (memory no thread of the kernel writes).
template <int VEC>
__device__ __forceinline__ Pack<VEC> load_readonly(const unsigned short* p) {
  Pack<VEC> v;
  if constexpr (VEC == 8) {
    const uint4 q = __ldg(reinterpret_cast<const uint4*>(p));
    v.w[0] = q.x, v.w[1] = q.y, v.w[2] = q.z, v.w[3] = q.w;
  } else {
    const uint2 q = __ldg(reinterpret_cast<const uint2*>(p));
    v.w[0] = q.x, v.w[1] = q.y;
  }
  return v;
}

// VEC bf16 values with a plain (coherent) load: for memory the kernel may also write.
template <int VEC>
__device__ __forceinline__ Pack<VEC> load_coherent(const unsigned short* p) {
  Pack<VEC> v;
  if constexpr (VEC == 8) {
    const uint4 q = *reinterpret_cast<const uint4*>(p);
    v.w[0] = q.x, v.w[1] = q.y, v.w[2] = q.z, v.w[3] = q.w;
  } else {
    const uint2 q = *reinterpret_cast<const uint2*>(p);
    v.w[0] = q.x, v.w[1] = q.y;
  }
  return v;
}

template <int VEC>
__device__ __forceinline__ void store_pack(unsigned short* p, const Pack<VEC>& v) {
  if constexpr (VEC == 8) {
    *reinterpret_cast<uint4*>(p) = make_uint4(v.w[0], v.w[1], v.w[2], v.w[3]);
  } else {
    *reinterpret_cast<uint2*>(p) = make_uint2(v.w[0], v.w[1]);
  }
}

// bf16(a[e]) for VEC values, one cvt.rn.bf16x2.f32 per pair.
template <int VEC>
__device__ __forceinline__ Pack<VEC> round_to_bf16(const float (&a)[VEC]) {
  Pack<VEC> p;
#pragma unroll
  for (int k = 0; k < VEC / 2; ++k) {
    const __nv_bfloat162 two = __floats2bfloat162_rn(a[2 * k], a[2 * k + 1]);
    p.w[k] = static_cast<unsigned int>(__bfloat16_as_ushort(two.x)) |
             (static_cast<unsigned int>(__bfloat16_as_ushort(two.y)) << 16);
  }
  return p;
}

}  // namespace dflash_bf16
