// The float64 CPU reference of the conv1d family (plain loops) and the host bf16 conversions it and the
// workloads use. Owns: the definition of the operator on the host side:
//   y[t, c] = silu(bias[c] + sum_{j=0..3} w[c, j] * x[t - 3 + j, c]),
// where x at positions before the start of the token's own sequence (per cu_seqlens) counts as 0.
// Who may call it: the conv1d workload's check and the tests. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>
#include "kernels/bf16.h"

namespace dflash::conv1d {

// bf16 bits -> value (exact).
double Bf16ToDouble(std::uint16_t bits);

// One host-side conv1d problem. x holds element (t, c) at x[t * x_stride_t + c * x_stride_c]; weight is
// [channels, 1, 4] contiguous; bias is empty (none) or [channels]; cu_seqlens is empty (one sequence) or
// num_seqs + 1 nondecreasing offsets from 0 to tokens.
struct ReferenceInput {
  std::span<const std::uint16_t> x;
  std::span<const std::uint16_t> weight;
  std::span<const std::uint16_t> bias;
  std::span<const std::int32_t> cu_seqlens;
  std::int64_t tokens = 0;
  std::int64_t channels = 0;
  std::int64_t x_stride_t = 0;
  std::int64_t x_stride_c = 0;
};

// y as [tokens, channels] row-major doubles (y[t * channels + c]), silu applied, nothing rounded.
// Preconditions (the caller's to keep): the spans cover every index the strides reach; cu_seqlens is valid.
std::vector<double> ReferenceConv1d(const ReferenceInput& in);

}  // namespace dflash::conv1d
