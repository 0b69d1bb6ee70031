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
