// Kernel sources and helpers shared by the JIT tests: a small templated bf16 kernel split over two embedded
// files, and an ELF header reader for the cubins NVRTC produces.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tuner/embedded_file.h"
#include "tuner/kernel_family.h"

namespace dflash::tuner::testing {

inline constexpr char kCommonCuh[] = R"(#pragma once
#include <cuda_bf16.h>
template <int kVec>
__device__ __forceinline__ float load_sum(const __nv_bfloat16* p) {
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < kVec; ++i) s += __bfloat162float(p[i]);
  return s;
}
)";

inline constexpr char kAxpyCu[] = R"(#include "common.cuh"
#ifndef AXPY_SCALE
#error "AXPY_SCALE must be defined"
#endif
// out[i] = AXPY_SCALE * sum(x[i*kVec .. i*kVec+kVec)) + y[i] for i < n; bf16 in and out, fp32 math.
template <int kBlock, int kVec>
__global__ void __launch_bounds__(kBlock) axpy_bf16(const __nv_bfloat16* x, const __nv_bfloat16* y,
                                                    __nv_bfloat16* out, int n) {
  __shared__ float staged[kBlock];
  int i = blockIdx.x * kBlock + threadIdx.x;
  staged[threadIdx.x] = i < n ? load_sum<kVec>(x + i * kVec) : 0.f;
  __syncthreads();
  if (i < n) out[i] = __float2bfloat16(AXPY_SCALE * staged[threadIdx.x] + __bfloat162float(y[i]));
}
)";

inline const EmbeddedFile kAxpySources[] = {
    {"axpy.cu", kAxpyCu, sizeof(kAxpyCu) - 1},
    {"common.cuh", kCommonCuh, sizeof(kCommonCuh) - 1},
};

inline CompileSpec AxpySpec() {
  CompileSpec spec;
  spec.main_file = "axpy.cu";
  spec.defines = {{"AXPY_SCALE", "2.0f"}};
  spec.name_expressions = {"axpy_bf16<128, 2>", "axpy_bf16<256, 1>"};
  return spec;
}

struct ElfHeader {
  bool is_elf64 = false;
  int abi_version = 0;
  std::uint16_t machine = 0;
  std::uint32_t flags = 0;
  // The SM the cubin is for: (flags >> 8) & 0xff from ELF ABI version 8 on, flags & 0xff before.
  int sm() const { return abi_version >= 8 ? static_cast<int>((flags >> 8) & 0xff) : static_cast<int>(flags & 0xff); }
};

inline ElfHeader ReadElfHeader(const std::vector<std::uint8_t>& bytes) {
  ElfHeader h;
  if (bytes.size() < 64 || std::memcmp(bytes.data(), "\x7f" "ELF", 4) != 0) return h;
  h.is_elf64 = bytes[4] == 2 && bytes[5] == 1;  // ELFCLASS64, little-endian
  h.abi_version = bytes[8];
  std::memcpy(&h.machine, bytes.data() + 18, sizeof(h.machine));
  std::memcpy(&h.flags, bytes.data() + 48, sizeof(h.flags));
  return h;
}

inline bool Contains(const std::vector<std::uint8_t>& bytes, const std::string& needle) {
  return std::search(bytes.begin(), bytes.end(), needle.begin(), needle.end()) != bytes.end();
}

inline std::string ReadTestData(const std::string& name) {
  std::ifstream in(std::string(DFLASH_JIT_TESTDATA_DIR) + "/" + name, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline int ArchNumber(const std::string& arch) { return std::stoi(arch.substr(3)); }  // "sm_90a" -> 90

}  // namespace dflash::tuner::testing
