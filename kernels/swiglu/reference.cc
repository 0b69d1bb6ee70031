#include "kernels/swiglu/reference.h"

#include <cmath>

#include "kernels/bf16.h"

namespace dflash::swiglu {

ReferenceOutput ReferenceSwiglu(const ReferenceInput& in) {
  ReferenceOutput o;
  o.out.resize(static_cast<std::size_t>(in.rows * in.cols));
  o.tol.resize(o.out.size());
  for (std::int64_t r = 0; r < in.rows; ++r) {
    for (std::int64_t c = 0; c < in.cols; ++c) {
      const double g = Bf16ToFloat(in.gate[static_cast<std::size_t>(r * in.gate_stride + c)]);
      const double u = Bf16ToFloat(in.up[static_cast<std::size_t>(r * in.up_stride + c)]);
      const double silu = g / (1.0 + std::exp(-g));
      const double s = Bf16ToFloat(FloatToBf16(static_cast<float>(silu)));
      const std::size_t at = static_cast<std::size_t>(r * in.cols + c);
      o.out[at] = s * u;
      // The kernel's fp32 silu (a few ulp of fp32) may round to the other bf16 neighbour of silu: one ulp of s.
      o.tol[at] = Bf16Ulp(s * u) + Bf16Ulp(silu) * std::fabs(u) + 1e-30;
    }
  }
  return o;
}

}  // namespace dflash::swiglu
