#include "trainer/train/adamw.h"

#include <cmath>
#include <map>

namespace dflash::trainer {

AdamW::AdamW(std::vector<std::pair<std::string, torch::Tensor>> params, AdamWOptions options)
    : params_(std::move(params)), options_(options) {
  for (const auto& [name, p] : params_) {
    TORCH_CHECK(p.scalar_type() == torch::kFloat, "AdamW: parameter ", name, " is not an fp32 master weight");
    exp_avg_.push_back(torch::zeros_like(p));
    exp_avg_sq_.push_back(torch::zeros_like(p));
  }
}

void AdamW::Step(double lr) {
  torch::NoGradGuard no_grad;
  ++step_;
  const double bc1 = 1.0 - std::pow(options_.beta1, double(step_));
  const double bc2 = 1.0 - std::pow(options_.beta2, double(step_));
  for (std::size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i].second;
    const auto& g = p.grad();
    if (!g.defined()) continue;
    if (options_.weight_decay != 0.0) p.mul_(1.0 - lr * options_.weight_decay);
    exp_avg_[i].lerp_(g, 1.0 - options_.beta1);
    exp_avg_sq_[i].mul_(options_.beta2).addcmul_(g, g, 1.0 - options_.beta2);
    const auto denom = (exp_avg_sq_[i].sqrt() / std::sqrt(bc2)).add_(options_.eps);
    p.addcdiv_(exp_avg_[i], denom, -lr / bc1);
  }
}

double AdamW::Update(double lr, double grad_divisor, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i].second;
    if (!p.grad().defined()) continue;
    params.push_back(p);
    grads.push_back(p.grad());
    exp_avgs.push_back(exp_avg_[i]);
    exp_avg_sqs.push_back(exp_avg_sq_[i]);
  }
  const bool fused = !params.empty() && params.front().is_cuda() && grad_divisor > 0;
  if (!fused) {
    if (grad_divisor > 0) {
      for (auto& g : grads) g.div_(grad_divisor);
    }
    const double norm = ClipGradNorm(params_, max_norm);
    if (grad_divisor > 0) Step(lr);
    return norm;
  }
  // ||g / d|| = ||g|| / d; the per-tensor norms in fp32, their sum in double.
  const auto norms = torch::stack(at::_foreach_norm(grads, 2)).to(torch::kDouble);
  const double norm = std::sqrt(norms.pow(2).sum().item<double>()) / grad_divisor;
  const double clip = max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
  ++step_;
  // The fused kernel reads a step count per tensor (already incremented, as torch.optim.AdamW passes it) for the
  // bias corrections: all equal step_.
  std::vector<torch::Tensor> steps;
  for (const auto& p : params) {
    steps.push_back(torch::full({}, static_cast<double>(step_), p.options().dtype(torch::kFloat)));
  }
  const auto grad_scale = torch::full({}, grad_divisor / clip, params.front().options().dtype(torch::kFloat));
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr, options_.beta1,
                    options_.beta2, options_.weight_decay, options_.eps, /*amsgrad=*/false, /*maximize=*/false,
                    grad_scale, /*found_inf=*/std::nullopt);
  return norm;
}

void AdamW::ZeroGrad() {
  for (auto& [name, p] : params_) {
    if (p.grad().defined()) p.mutable_grad() = torch::Tensor();
  }
}

std::vector<std::pair<std::string, torch::Tensor>> AdamW::StateTensors() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    out.emplace_back(params_[i].first + ".exp_avg", exp_avg_[i]);
    out.emplace_back(params_[i].first + ".exp_avg_sq", exp_avg_sq_[i]);
  }
  return out;
}

Status AdamW::LoadState(const std::vector<std::pair<std::string, torch::Tensor>>& state, std::int64_t step) {
  std::map<std::string, torch::Tensor> by_name(state.begin(), state.end());
  auto take = [&](const std::string& name, const torch::Tensor& like, torch::Tensor& into) -> Status {
    auto it = by_name.find(name);
    if (it == by_name.end()) return InvalidArgument("optimizer state: missing tensor " + name);
    if (it->second.sizes() != like.sizes()) {
      return InvalidArgument("optimizer state: tensor " + name + " has the wrong shape");
    }
    torch::NoGradGuard no_grad;
    into.copy_(it->second);
    return Status::Ok();
  };
  for (std::size_t i = 0; i < params_.size(); ++i) {
    DFLASH_RETURN_IF_ERROR(take(params_[i].first + ".exp_avg", params_[i].second, exp_avg_[i]));
    DFLASH_RETURN_IF_ERROR(take(params_[i].first + ".exp_avg_sq", params_[i].second, exp_avg_sq_[i]));
  }
  if (step < 0) return InvalidArgument("optimizer state: negative step count");
  step_ = step;
  return Status::Ok();
}

double ClipGradNorm(const std::vector<std::pair<std::string, torch::Tensor>>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& [name, p] : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return 0.0;
  std::vector<torch::Tensor> squares;
  for (const auto& g : grads) squares.push_back(g.to(torch::kDouble).pow(2).sum());
  const double norm = std::sqrt(torch::stack(squares).sum().item<double>());
  if (max_norm > 0 && norm > max_norm) {
    const double factor = max_norm / (norm + 1e-6);
    for (auto& g : grads) g.mul_(factor);
  }
  return norm;
}

}  // namespace dflash::trainer
