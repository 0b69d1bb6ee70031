#include "kernels/rope/reference.h"

#include "kernels/bf16.h"

namespace dflash::rope {

std::vector<double> ReferenceRope(const ReferenceInput& in) {
  const std::int64_t T = in.tokens, H = in.heads, D = in.head_dim, R = in.rotary_dim, half = R / 2;
  std::vector<double> out(static_cast<std::size_t>(T * H * D));
  for (std::int64_t t = 0; t < T; ++t) {
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t base = t * in.token_stride + h * in.head_stride;
      auto x = [&](std::int64_t i) { return static_cast<double>(Bf16ToFloat(in.x[static_cast<std::size_t>(base + i)])); };
      auto c = [&](std::int64_t i) { return static_cast<double>(in.cos[static_cast<std::size_t>(t * R + i)]); };
      auto s = [&](std::int64_t i) { return in.sign * static_cast<double>(in.sin[static_cast<std::size_t>(t * R + i)]); };
      double* y = out.data() + (t * H + h) * D;
      for (std::int64_t i = 0; i < half; ++i) {
        y[i] = x(i) * c(i) - x(i + half) * s(i);
        y[i + half] = x(i + half) * c(i + half) + x(i) * s(i + half);
      }
      for (std::int64_t i = R; i < D; ++i) y[i] = x(i);
    }
  }
  return out;
}

}  // namespace dflash::rope
