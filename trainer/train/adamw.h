// AdamW over fp32 master weights (spec dflash-training.md §6), with its state exposed for exact checkpoints.
// Owns: the first/second moments per parameter and the step count. The update is PyTorch's torch.optim.AdamW
// (decoupled weight decay, bias-corrected moments), written out here so every tensor of the state is ours to save:
//   p <- p (1 - lr wd);  m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2;
//   p <- p - (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// Who may call: the training loop. Thread-safety: one thread.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace dflash::trainer {

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};

class AdamW {
 public:
  // `params`: (name, fp32 leaf tensor with requires_grad); the names key the saved state.
  AdamW(std::vector<std::pair<std::string, torch::Tensor>> params, AdamWOptions options);

  // One update with learning rate `lr` from the parameters' current .grad() (a parameter without a gradient is
  // left alone, its moments too). Increments step().
  void Step(double lr);
  // The training loop's update: the gradients divided by `grad_divisor` (the global batch's weight sum), clipped to
  // the global L2 norm `max_norm` (0: no clipping), then Step(lr). Returns the norm before clipping. No update when
  // grad_divisor <= 0 (no slot had any weight). On a GPU this is two multi-tensor passes over the gradients (their
  // norm, then LibTorch's fused AdamW kernel with the division and the clip folded into its gradient scale), against
  // the separate passes of the division, ClipGradNorm and Step (what the CPU runs).
  double Update(double lr, double grad_divisor, double max_norm);
  void ZeroGrad();

  std::int64_t step() const { return step_; }
  // The state as named tensors ("<param>.exp_avg", "<param>.exp_avg_sq") and the step count.
  std::vector<std::pair<std::string, torch::Tensor>> StateTensors() const;
  // Restores what StateTensors() returned. InvalidArgument naming a missing or mis-shaped state tensor.
  Status LoadState(const std::vector<std::pair<std::string, torch::Tensor>>& state, std::int64_t step);

 private:
  std::vector<std::pair<std::string, torch::Tensor>> params_;
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_;
  AdamWOptions options_;
  std::int64_t step_ = 0;
};

// Clips the global L2 norm of all gradients to max_norm (no-op when max_norm <= 0); returns the norm before clipping.
double ClipGradNorm(const std::vector<std::pair<std::string, torch::Tensor>>& params, double max_norm);

}  // namespace dflash::trainer
