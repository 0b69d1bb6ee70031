#include "kernels/conv1d/reference.h"

#include <cmath>
#include <cstring>

namespace dflash::conv1d {

double Bf16ToDouble(std::uint16_t bits) { return static_cast<double>(Bf16ToFloat(bits)); }

std::vector<double> ReferenceConv1d(const ReferenceInput& in) {
  const std::int64_t T = in.tokens, C = in.channels;
  std::vector<double> y(static_cast<std::size_t>(T * C));
  // seq_start[t]: first token of t's sequence.
  std::vector<std::int64_t> seq_start(static_cast<std::size_t>(T), 0);
  if (!in.cu_seqlens.empty()) {
    for (std::size_t s = 0; s + 1 < in.cu_seqlens.size(); ++s)
      for (std::int64_t t = in.cu_seqlens[s]; t < in.cu_seqlens[s + 1]; ++t) seq_start[t] = in.cu_seqlens[s];
  }
  for (std::int64_t t = 0; t < T; ++t) {
    for (std::int64_t c = 0; c < C; ++c) {
      double acc = in.bias.empty() ? 0.0 : Bf16ToDouble(in.bias[c]);
      for (std::int64_t j = 0; j < 4; ++j) {
        const std::int64_t src = t - 3 + j;
        if (src < seq_start[t]) continue;
        acc += Bf16ToDouble(in.weight[c * 4 + j]) * Bf16ToDouble(in.x[src * in.x_stride_t + c * in.x_stride_c]);
      }
      y[t * C + c] = acc / (1.0 + std::exp(-acc));
    }
  }
  return y;
}

}  // namespace dflash::conv1d
