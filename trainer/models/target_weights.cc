#include "trainer/models/target_weights.h"

#include <cmath>

#include "trainer/checkpoint/target_tensors.h"
#include "trainer/models/init_generator.h"

namespace dflash::trainer {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool IsFp32Gate(const std::string& name) { return EndsWith(name, ".A_log") || EndsWith(name, ".dt_bias"); }

// splitmix64 over the seed and an FNV-1a hash of the name: one independent stream per tensor.
std::uint64_t TensorSeed(std::uint64_t seed, const std::string& name) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * (h | 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

torch::Tensor InitValue(const setup::TargetConfig& c, const TensorSpec& spec, std::uint64_t seed, double init_std,
                        torch::Device device) {
  const auto opts = torch::TensorOptions().dtype(torch::kFloat).device(device);
  auto gen = InitGenerator(TensorSeed(seed, spec.name), device);
  const std::string& n = spec.name;
  if (EndsWith(n, ".A_log")) return torch::empty(spec.shape, opts).uniform_(1.0, 16.0, gen).log_();
  if (EndsWith(n, ".dt_bias")) return torch::ones(spec.shape, opts);
  if (EndsWith(n, ".bias")) return torch::zeros(spec.shape, opts);
  if (EndsWith(n, "linear_attn.norm.weight")) return torch::ones(spec.shape, opts);  // gated norm: standard kind
  if (EndsWith(n, "norm.weight")) {  // input/post-attention layernorms, q/k norms, final norm
    return c.arch == setup::TargetArch::kQwen3_5Hybrid ? torch::zeros(spec.shape, opts) : torch::ones(spec.shape, opts);
  }
  return torch::empty(spec.shape, opts).normal_(0.0, init_std, gen);
}

}  // namespace

std::string TargetFinalNormName(const setup::TargetConfig& c) { return c.weight_prefix + "norm.weight"; }

Result<std::vector<TensorSpec>> TargetModelTensors(const setup::TargetConfig& c, std::int64_t last_layer,
                                                   bool with_final_norm) {
  DFLASH_ASSIGN_OR_RETURN(auto specs, TargetTensorsNeeded(c, last_layer));
  if (with_final_norm) specs.push_back(TensorSpec{TargetFinalNormName(c), {c.hidden_size}, std::nullopt});
  return specs;
}

torch::Dtype TargetStorageDtype(const std::string& name, torch::Dtype activation_dtype) {
  return IsFp32Gate(name) ? torch::kFloat : activation_dtype;
}

TargetWeights RandomTargetWeights(const setup::TargetConfig& c, const std::vector<TensorSpec>& specs,
                                  std::uint64_t seed, double init_std, torch::Dtype dtype, torch::Device device) {
  TargetWeights out;
  for (const auto& spec : specs) {
    out[spec.name] = InitValue(c, spec, seed, init_std, device).to(TargetStorageDtype(spec.name, dtype));
  }
  return out;
}

}  // namespace dflash::trainer
