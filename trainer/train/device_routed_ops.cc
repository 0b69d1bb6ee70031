#include "trainer/train/device_routed_ops.h"

namespace dflash::trainer {

DeviceRoutedOps::DeviceRoutedOps(Ops& drafter_ops, torch::Device drafter_device, Ops& target_ops,
                                 torch::Device target_device)
    : drafter_ops_(drafter_ops), drafter_device_(drafter_device), target_ops_(target_ops),
      target_device_(target_device) {}

std::string DeviceRoutedOps::name() const {
  return "drafter " + drafter_ops_.name() + " on " + drafter_device_.str() + ", target " + target_ops_.name() +
         " on " + target_device_.str();
}

Ops& DeviceRoutedOps::For(const torch::Tensor& input, const char* operation) {
  if (input.device() == drafter_device_) return drafter_ops_;
  if (input.device() == target_device_) return target_ops_;
  TORCH_CHECK(false, operation, ": input on ", input.device().str(), ", but this run's drafter is on ",
              drafter_device_.str(), " and its target on ", target_device_.str());
}

torch::Tensor DeviceRoutedOps::DraftAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                              const DraftMask& mask, double scale) {
  return For(q, "draft attention").DraftAttention(q, k, v, mask, scale);
}

torch::Tensor DeviceRoutedOps::CausalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                               const torch::Tensor& cu_seqlens, double scale) {
  return For(q, "causal attention").CausalAttention(q, k, v, cu_seqlens, scale);
}

torch::Tensor DeviceRoutedOps::CausalConv1dSilu(const torch::Tensor& x, const torch::Tensor& weight,
                                                const torch::Tensor& cu_seqlens) {
  return For(x, "causal conv1d").CausalConv1dSilu(x, weight, cu_seqlens);
}

torch::Tensor DeviceRoutedOps::GatedDeltaRule(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                              const torch::Tensor& a, const torch::Tensor& b,
                                              const torch::Tensor& A_log, const torch::Tensor& dt_bias,
                                              const torch::Tensor& cu_seqlens) {
  return For(q, "gated delta rule").GatedDeltaRule(q, k, v, a, b, A_log, dt_bias, cu_seqlens);
}

torch::Tensor DeviceRoutedOps::RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps,
                                       nn::NormKind kind) {
  return For(x, "rms norm").RmsNorm(x, weight, eps, kind);
}

std::pair<torch::Tensor, torch::Tensor> DeviceRoutedOps::AddRmsNorm(const torch::Tensor& h, const torch::Tensor& delta,
                                                                    const torch::Tensor& weight, double eps,
                                                                    nn::NormKind kind) {
  return For(h, "residual add + rms norm").AddRmsNorm(h, delta, weight, eps, kind);
}

torch::Tensor DeviceRoutedOps::GatedRmsNorm(const torch::Tensor& x, const torch::Tensor& weight,
                                            const torch::Tensor& gate, double eps) {
  return For(x, "gated rms norm").GatedRmsNorm(x, weight, gate, eps);
}

torch::Tensor DeviceRoutedOps::TrainedRmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  return For(x, "trained rms norm").TrainedRmsNorm(x, weight, eps);
}

torch::Tensor DeviceRoutedOps::Rope(const torch::Tensor& x, const nn::RopeTables& rope) {
  return For(x, "rope").Rope(x, rope);
}

torch::Tensor DeviceRoutedOps::SwiGlu(const torch::Tensor& gate, const torch::Tensor& up) {
  return For(gate, "swiglu").SwiGlu(gate, up);
}

torch::Tensor DeviceRoutedOps::TrainedRope(const torch::Tensor& x, const nn::RopeTables& rope) {
  return For(x, "trained rope").TrainedRope(x, rope);
}

CrossEntropyRows DeviceRoutedOps::CrossEntropy(const torch::Tensor& logits, const torch::Tensor& labels,
                                               const torch::Tensor& weights, double grad_scale, bool with_grad,
                                               torch::Dtype grad_dtype) {
  return For(logits, "cross-entropy").CrossEntropy(logits, labels, weights, grad_scale, with_grad, grad_dtype);
}

}  // namespace dflash::trainer
