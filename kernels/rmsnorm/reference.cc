#include "kernels/rmsnorm/reference.h"

#include <algorithm>
#include <cmath>

namespace dflash::rmsnorm {
namespace {

double Value(std::uint16_t bf16) { return static_cast<double>(Bf16ToFloat(bf16)); }

}  // namespace

std::uint16_t ResidualSum(std::uint16_t x, std::uint16_t r) { return FloatToBf16(Bf16ToFloat(x) + Bf16ToFloat(r)); }

ReferenceOutput ReferenceRmsNorm(const ReferenceInput& in) {
  const std::int64_t R = in.rows, C = in.cols;
  const bool residual = !in.residual.empty();
  ReferenceOutput o;
  o.out.resize(static_cast<std::size_t>(R * C));
  if (residual) o.sum.resize(static_cast<std::size_t>(R * C));
  std::vector<std::uint16_t> s(static_cast<std::size_t>(C));
  for (std::int64_t i = 0; i < R; ++i) {
    double squares = 0.0;
    for (std::int64_t c = 0; c < C; ++c) {
      const std::uint16_t x = in.x[static_cast<std::size_t>(i * in.x_stride + c)];
      s[c] = residual ? ResidualSum(x, in.residual[static_cast<std::size_t>(i * in.residual_stride + c)]) : x;
      squares += Value(s[c]) * Value(s[c]);
    }
    const double inv_rms = 1.0 / std::sqrt(squares / static_cast<double>(C) + static_cast<double>(in.eps));
    for (std::int64_t c = 0; c < C; ++c) {
      const double w = in.weight_fp32.empty() ? Value(in.weight_bf16[c]) : static_cast<double>(in.weight_fp32[c]);
      double y = Value(s[c]) * inv_rms * (in.kind == Kind::kZeroCentred ? 1.0 + w : w);
      if (!in.gate.empty()) {
        const double z = Value(in.gate[static_cast<std::size_t>(i * in.gate_stride + c)]);
        y *= z / (1.0 + std::exp(-z));
      }
      const std::size_t at = static_cast<std::size_t>(i * C + c);
      o.out[at] = y;
      if (residual) o.sum[at] = s[c];
    }
  }
  return o;
}

ReferenceGradients ReferenceRmsNormBackward(const ReferenceInput& in, std::span<const std::uint16_t> dy,
                                            std::int64_t dy_stride) {
  const std::int64_t R = in.rows, C = in.cols;
  ReferenceGradients o;
  o.dx.resize(static_cast<std::size_t>(R * C));
  o.dw.assign(static_cast<std::size_t>(C), 0.0);
  o.dx_scale.resize(static_cast<std::size_t>(R));
  o.dw_abs.assign(static_cast<std::size_t>(C), 0.0);
  std::vector<double> n(static_cast<std::size_t>(C)), g(static_cast<std::size_t>(C));
  for (std::int64_t i = 0; i < R; ++i) {
    double squares = 0.0;
    for (std::int64_t c = 0; c < C; ++c) {
      const double x = Value(in.x[static_cast<std::size_t>(i * in.x_stride + c)]);
      squares += x * x;
    }
    const double inv_rms = 1.0 / std::sqrt(squares / static_cast<double>(C) + static_cast<double>(in.eps));
    double gn = 0.0, g_max = 0.0, n_max = 0.0;
    for (std::int64_t c = 0; c < C; ++c) {
      const double w = in.weight_fp32.empty() ? Value(in.weight_bf16[c]) : static_cast<double>(in.weight_fp32[c]);
      const double d = Value(dy[static_cast<std::size_t>(i * dy_stride + c)]);
      n[c] = Value(in.x[static_cast<std::size_t>(i * in.x_stride + c)]) * inv_rms;
      g[c] = d * (in.kind == Kind::kZeroCentred ? 1.0 + w : w);
      gn += g[c] * n[c];
      o.dw[c] += d * n[c];
      o.dw_abs[c] += std::fabs(d * n[c]);
      g_max = std::max(g_max, std::fabs(g[c]));
      n_max = std::max(n_max, std::fabs(n[c]));
    }
    const double mean_gn = gn / static_cast<double>(C);
    o.dx_scale[static_cast<std::size_t>(i)] = (g_max + n_max * std::fabs(mean_gn)) * inv_rms;
    for (std::int64_t c = 0; c < C; ++c) o.dx[static_cast<std::size_t>(i * C + c)] = (g[c] - n[c] * mean_gn) * inv_rms;
  }
  return o;
}

}  // namespace dflash::rmsnorm
