// The float64 CPU reference of the swiglu family: out = s * u with s = bf16(g / (1 + exp(-g))) — the silu in float64
// rounded once to bf16 (as LibTorch's bf16 silu output is) — and the product in float64, not rounded (the kernel's
// bf16 output is compared with a tolerance: one bf16 ulp of the product, plus what one bf16 ulp of s can move it
// when the kernel's fp32 silu rounds to the neighbouring bf16 value).
// Who may call it: the swiglu workload's check and the tests. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace dflash::swiglu {

struct ReferenceInput {
  std::span<const std::uint16_t> gate;  // bf16 bits, row r at r * gate_stride
  std::span<const std::uint16_t> up;
  std::int64_t gate_stride = 0, up_stride = 0;
  std::int64_t rows = 0, cols = 0;
};

struct ReferenceOutput {
  std::vector<double> out;  // [rows, cols]
  std::vector<double> tol;  // [rows, cols]: the allowed |kernel - out|
};

ReferenceOutput ReferenceSwiglu(const ReferenceInput& in);

}  // namespace dflash::swiglu
