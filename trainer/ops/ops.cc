#include "trainer/ops/ops.h"

namespace dflash::trainer {

torch::Tensor TargetOps::RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps,
                                 nn::NormKind kind) {
  return nn::RmsNorm(x, weight, eps, kind);
}

std::pair<torch::Tensor, torch::Tensor> TargetOps::AddRmsNorm(const torch::Tensor& h, const torch::Tensor& delta,
                                                              const torch::Tensor& weight, double eps,
                                                              nn::NormKind kind) {
  auto sum = h + delta.to(h.scalar_type());
  auto normed = RmsNorm(sum, weight, eps, kind);
  return {std::move(sum), std::move(normed)};
}

torch::Tensor TargetOps::GatedRmsNorm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& gate,
                                      double eps) {
  return nn::GatedRmsNorm(x, weight, gate, eps);
}

torch::Tensor TargetOps::Rope(const torch::Tensor& x, const nn::RopeTables& rope) { return nn::ApplyRope(x, rope); }

torch::Tensor TargetOps::SwiGlu(const torch::Tensor& gate, const torch::Tensor& up) { return torch::silu(gate) * up; }

torch::Tensor DrafterOps::TrainedRope(const torch::Tensor& x, const nn::RopeTables& rope) {
  return nn::ApplyRope(x, rope);
}

torch::Tensor DrafterOps::TrainedRmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  return nn::RmsNorm(x, weight, eps, nn::NormKind::kStandard);
}

CrossEntropyRows DrafterOps::CrossEntropy(const torch::Tensor& logits, const torch::Tensor& labels,
                                          const torch::Tensor& weights, double grad_scale, bool with_grad,
                                          torch::Dtype grad_dtype) {
  return ReferenceCrossEntropy(logits, labels, weights, grad_scale, with_grad, grad_dtype);
}

CrossEntropyRows ReferenceCrossEntropy(const torch::Tensor& logits, const torch::Tensor& labels,
                                       const torch::Tensor& weights, double grad_scale, bool with_grad,
                                       torch::Dtype grad_dtype) {
  constexpr std::int64_t kIgnore = -100;  // data::kIgnoreLabel
  const auto valid = labels != kIgnore;
  const auto safe = torch::where(valid, labels, torch::zeros_like(labels));
  const auto weight = torch::where(valid, weights.to(torch::kFloat), torch::zeros_like(weights, torch::kFloat));
  const auto ce = torch::logsumexp(logits, -1) - logits.gather(1, safe.unsqueeze(1)).squeeze(1);
  CrossEntropyRows out;
  // where(): a zero weight must give 0 even if that row's CE is not finite.
  out.loss = torch::where(weight != 0, weight * ce, torch::zeros_like(ce));
  out.argmax = logits.argmax(-1);
  if (with_grad) {
    auto grad = torch::softmax(logits, -1);
    grad.scatter_add_(1, safe.unsqueeze(1), -valid.to(torch::kFloat).unsqueeze(1));
    // Zero-weight rows are zeroed outright (softmax of non-finite logits would otherwise leak NaN).
    const auto scale = (weight * grad_scale).unsqueeze(1);
    grad.mul_(scale).masked_fill_(scale == 0, 0.0);
    out.grad = grad.to(grad_dtype);
  }
  return out;
}

}  // namespace dflash::trainer
