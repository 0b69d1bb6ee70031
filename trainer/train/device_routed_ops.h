// DeviceRoutedOps: the Ops (ops.h) of a run whose target and drafter sit on different GPUs (--target-device-offset,
// dist/placement.h): each call goes to the backend of the device its first input lives on (the target's cached
// kernels run on the target's GPU, the drafter's on its own). An input on neither device is a TORCH_CHECK failure.
// Who may call: the Trainer (the row step's Ops). Thread-safety: as the two Ops objects it routes to (one thread).
#pragma once

#include <string>

#include "trainer/ops/ops.h"

namespace dflash::trainer {

class DeviceRoutedOps final : public Ops {
 public:
  // Both Ops objects must outlive this one.
  DeviceRoutedOps(Ops& drafter_ops, torch::Device drafter_device, Ops& target_ops, torch::Device target_device);

  std::string name() const override;
  torch::Tensor DraftAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const DraftMask& mask, double scale) override;
  torch::Tensor CausalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& cu_seqlens, double scale) override;
  torch::Tensor CausalConv1dSilu(const torch::Tensor& x, const torch::Tensor& weight,
                                 const torch::Tensor& cu_seqlens) override;
  torch::Tensor GatedDeltaRule(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& A_log,
                               const torch::Tensor& dt_bias, const torch::Tensor& cu_seqlens) override;
  torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps, nn::NormKind kind) override;
  std::pair<torch::Tensor, torch::Tensor> AddRmsNorm(const torch::Tensor& h, const torch::Tensor& delta,
                                                     const torch::Tensor& weight, double eps,
                                                     nn::NormKind kind) override;
  torch::Tensor GatedRmsNorm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& gate,
                             double eps) override;
  torch::Tensor TrainedRmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps) override;
  torch::Tensor Rope(const torch::Tensor& x, const nn::RopeTables& rope) override;
  torch::Tensor SwiGlu(const torch::Tensor& gate, const torch::Tensor& up) override;
  torch::Tensor TrainedRope(const torch::Tensor& x, const nn::RopeTables& rope) override;
  CrossEntropyRows CrossEntropy(const torch::Tensor& logits, const torch::Tensor& labels, const torch::Tensor& weights,
                                double grad_scale, bool with_grad, torch::Dtype grad_dtype) override;

 private:
  Ops& For(const torch::Tensor& input, const char* operation);

  Ops& drafter_ops_;
  torch::Device drafter_device_;
  Ops& target_ops_;
  torch::Device target_device_;
};

}  // namespace dflash::trainer
