#include "trainer/nn/layers.h"

namespace dflash::trainer::nn {

torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps, NormKind kind) {
  const auto x32 = x.to(torch::kFloat);
  const auto normed = x32 * torch::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  const auto w32 = weight.to(torch::kFloat);
  return (kind == NormKind::kZeroCentred ? normed * (1.0 + w32) : normed * w32).to(x.scalar_type());
}

torch::Tensor GatedRmsNorm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& gate,
                           double eps) {
  const auto normed = RmsNorm(x.to(torch::kFloat), weight, eps, NormKind::kStandard);
  return (normed * torch::silu(gate.to(torch::kFloat))).to(x.scalar_type());
}

torch::Tensor Linear(const torch::Tensor& x, const torch::Tensor& weight) {
  return torch::matmul(x, weight.to(x.scalar_type()).t());
}

torch::Tensor SwiGluMlp(const torch::Tensor& x, const torch::Tensor& gate_weight, const torch::Tensor& up_weight,
                        const torch::Tensor& down_weight) {
  return Linear(torch::silu(Linear(x, gate_weight)) * Linear(x, up_weight), down_weight);
}

RopeTables MakeRope(const torch::Tensor& positions, std::int64_t rotary_dim, double theta) {
  const auto opts = torch::TensorOptions().dtype(torch::kFloat).device(positions.device());
  const auto inv_freq =
      torch::pow(theta, -torch::arange(0, rotary_dim, 2, opts.dtype(torch::kDouble)) / double(rotary_dim))
          .to(torch::kFloat);
  const auto freqs = positions.to(torch::kFloat).unsqueeze(1) * inv_freq.unsqueeze(0);  // [T, rotary_dim / 2]
  const auto emb = torch::cat({freqs, freqs}, -1);
  return {emb.cos(), emb.sin(), rotary_dim};
}

namespace {
torch::Tensor RotateHalf(const torch::Tensor& x) {
  const auto half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}
}  // namespace

torch::Tensor ApplyRope(const torch::Tensor& x, const RopeTables& rope) {
  const auto rot = x.narrow(-1, 0, rope.rotary_dim).to(torch::kFloat);
  const auto cos = rope.cos.unsqueeze(1), sin = rope.sin.unsqueeze(1);  // broadcast over heads
  const auto rotated = (rot * cos + RotateHalf(rot) * sin).to(x.scalar_type());
  if (rope.rotary_dim == x.size(-1)) return rotated;
  return torch::cat({rotated, x.narrow(-1, rope.rotary_dim, x.size(-1) - rope.rotary_dim)}, -1);
}

}  // namespace dflash::trainer::nn
