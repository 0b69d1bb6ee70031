// The float64 CPU reference of the rope family (plain loops). Owns: the definition of the operator on the host side:
// for each token t, head h and i < R/2 (R the rotary dim), with c = cos[t, .], s = sign * sin[t, .] (fp32 tables)
//   y[i] = x[i] c[i] - x[i + R/2] s[i],   y[i + R/2] = x[i + R/2] c[i + R/2] + x[i] s[i + R/2],   y[R:] = x[R:]
// in float64, nothing rounded (the kernel's bf16 output is compared with a tolerance; the tail bit for bit).
// Who may call it: the rope workload's check and the tests. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace dflash::rope {

struct ReferenceInput {
  std::span<const std::uint16_t> x;  // bf16 bits; head (t, h) at t * token_stride + h * head_stride
  std::span<const float> cos;        // [tokens, rotary_dim]
  std::span<const float> sin;
  std::int64_t token_stride = 0, head_stride = 0;
  std::int64_t tokens = 0, heads = 0, head_dim = 0, rotary_dim = 0;
  double sign = 1.0;
};

// [tokens, heads, head_dim] row-major. Preconditions (the caller's): the spans cover every index the strides reach.
std::vector<double> ReferenceRope(const ReferenceInput& in);

}  // namespace dflash::rope
